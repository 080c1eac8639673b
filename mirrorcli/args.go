package mirrorcli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

// UsageError is a problem with the command line. Its message names the
// problem and the fix; the caller exits with status 2.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &UsageError{fmt.Sprintf(format, args...)} }

// IsUsage reports whether err is a command-line problem.
func IsUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}

// Action is the one thing a `kmirror mirrors` invocation does.
type Action string

const (
	ActCreate   Action = "create"
	ActAdd      Action = "add"
	ActRemove   Action = "remove"
	ActPause    Action = "pause"
	ActResume   Action = "resume"
	ActList     Action = "list"
	ActDescribe Action = "describe"
	ActDelete   Action = "delete"
	ActAlter    Action = "alter"
	// ActRecoverState rebuilds a mirror whose state was lost
	// (__mirror_state deleted or replaced straight at a broker).
	ActRecoverState Action = "recover-state"
	// Mirrors as code: make the mirrors what a file declares, show what
	// that would change, or write the file for what exists.
	ActApply  Action = "apply"
	ActDiff   Action = "diff"
	ActExport Action = "export"
	// ActSwitch switches a route (docs/cutover.md): --switch --route R [--force].
	ActSwitch Action = "switch"
)

var actions = []Action{ActCreate, ActAdd, ActRemove, ActPause, ActResume, ActList, ActDescribe, ActDelete, ActAlter, ActRecoverState, ActApply, ActDiff, ActExport, ActSwitch}

// MirrorsArgs is a parsed `kmirror mirrors` command line.
type MirrorsArgs struct {
	Action        Action
	Bootstrap     string
	CommandConfig string
	Mirror        string
	MirrorConfig  string
	Topics        TopicSelection // --topics
	Exclude       []string       // --exclude, as regexes
	Failed, JSON  bool
	Wait          bool
	// WaitForSync (--wait-for-sync, with --remove) waits until nothing is
	// at risk before failing over, and implies Wait.
	WaitForSync bool
	Timeout     time.Duration
	// --alter: configs to set (--add-config, and --mirror-config's lines) and
	// to put back to their defaults (--delete-config).
	AddConfig    []KV
	DeleteConfig []string
	// --describe --configs: the mirror's configs instead of its partitions.
	Configs bool
	// --full (with --describe --configs): values whole, not shortened.
	Full bool
	// -f FILE: the mirrors file of --apply and --diff, where --export writes.
	File string
	// --allow-destructive: --apply may pause, fail over and delete what the
	// file says to.
	AllowDestructive bool
	// --switch: the route, and --force (the primary is gone: no freeze,
	// drain or group copy).
	Route string
	Force bool
}

// TopicSelection is a --topics value: either plain topic names or one
// regular expression.
type TopicSelection struct {
	Names   []string
	Pattern string
}

// IsPattern reports whether the selection is a regular expression.
func (s TopicSelection) IsPattern() bool { return s.Pattern != "" }

func (s TopicSelection) String() string {
	if s.IsPattern() {
		return "/" + s.Pattern + "/"
	}
	return strings.Join(s.Names, ",")
}

// topicNameRE is what a Kafka topic name may contain.
var topicNameRE = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// ParseTopics classifies a --topics or --exclude value. The rule:
//
//   - If every comma-separated entry (spaces around entries ignored) is made
//     only of characters legal in a Kafka topic name (a-z A-Z 0-9 . _ -), the
//     value is a list of exact topic names. A '.' in a name is literal.
//   - Otherwise the whole value is ONE regular expression (Go RE2 syntax,
//     matched against the whole topic name), commas included: 'a{1,3}' and
//     'orders|payments-.*' are patterns. To select several patterns, join
//     them with '|'. To force a pattern made only of name characters, wrap
//     it in parentheses: '(orders.v.)'.
func ParseTopics(flagName, v string) (TopicSelection, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return TopicSelection{}, usagef("%s is empty; give topic names separated by commas, or one regular expression", flagName)
	}
	entries := strings.Split(v, ",")
	names := make([]string, 0, len(entries))
	plain := true
	for i := range entries {
		e := strings.TrimSpace(entries[i])
		if e != "" && !topicNameRE.MatchString(e) {
			plain = false
			break
		}
		names = append(names, e)
	}
	if plain {
		seen := map[string]bool{}
		out := names[:0]
		for _, n := range names {
			if n == "" {
				return TopicSelection{}, usagef("%s %q has an empty topic name; remove the extra comma", flagName, v)
			}
			if n == "." || n == ".." {
				return TopicSelection{}, usagef("%s: %q is not a valid topic name", flagName, n)
			}
			if len(n) > 249 {
				return TopicSelection{}, usagef("%s: topic name %q is longer than Kafka's limit of 249 characters", flagName, n)
			}
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
		return TopicSelection{Names: out}, nil
	}
	if _, err := regexp.Compile("^(?:" + v + ")$"); err != nil {
		return TopicSelection{}, usagef("%s %q is read as a regular expression (it has characters topic names cannot have) but does not compile: %v; fix the pattern, or list topic names separated by commas", flagName, v, err)
	}
	return TopicSelection{Pattern: v}, nil
}

// flagUse lists which actions take each optional flag.
var flagUse = map[string][]Action{
	"mirror":            {ActCreate, ActAdd, ActRemove, ActPause, ActResume, ActDescribe, ActDelete, ActAlter, ActRecoverState, ActApply, ActDiff, ActExport},
	"mirror-config":     {ActCreate, ActAlter, ActRecoverState, ActApply, ActDiff, ActExport},
	"add-config":        {ActAlter},
	"delete-config":     {ActAlter},
	"configs":           {ActDescribe},
	"topics":            {ActAdd, ActRemove, ActPause, ActResume},
	"exclude":           {ActAdd},
	"failed":            {ActDescribe},
	"json":              {ActDescribe, ActList},
	"wait":              {ActRemove},
	"wait-for-sync":     {ActRemove},
	"f":                 {ActApply, ActDiff, ActExport},
	"allow-destructive": {ActApply},
	"full":              {ActDescribe},
	"route":             {ActSwitch},
	"force":             {ActSwitch},
}

// ParseMirrorsArgs parses and validates a `kmirror mirrors` command line.
// Help (-h) returns flag.ErrHelp after writing the help text to help.
func ParseMirrorsArgs(args []string, help io.Writer) (*MirrorsArgs, error) {
	a := &MirrorsArgs{}
	f := newMirrorsFlags(a)
	if err := parseFlags(f.fs, args, help, MirrorsHelp, "every value belongs to a flag (e.g. --mirror NAME); quote a pattern that contains spaces"); err != nil {
		return nil, err
	}
	f.fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	f.set["f"] = f.set["f"] || f.set["file"] // one flag, two spellings
	for _, check := range []func(*MirrorsArgs) error{f.pickAction, f.checkApply, f.checkNeeds, f.parseAlter, f.parseTopics, f.parseExclude} {
		if err := check(a); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// mirrorsFlags are the flags of `kmirror mirrors` as given, before they are
// checked into MirrorsArgs.
type mirrorsFlags struct {
	fs                                       *flag.FlagSet
	picked                                   map[Action]*bool
	topics, exclude, addConfig, deleteConfig string
	set                                      map[string]bool // the flags given
}

func newMirrorsFlags(a *MirrorsArgs) *mirrorsFlags {
	f := &mirrorsFlags{fs: flag.NewFlagSet("kmirror mirrors", flag.ContinueOnError), picked: map[Action]*bool{}, set: map[string]bool{}}
	fs := f.fs
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	for _, act := range actions {
		f.picked[act] = fs.Bool(string(act), false, "")
	}
	fs.StringVar(&a.Bootstrap, "bootstrap-server", "", "")
	fs.StringVar(&a.CommandConfig, "command-config", "", "")
	fs.StringVar(&a.Mirror, "mirror", "", "")
	fs.StringVar(&a.MirrorConfig, "mirror-config", "", "")
	fs.StringVar(&f.topics, "topics", "", "")
	fs.StringVar(&f.exclude, "exclude", "", "")
	fs.BoolVar(&a.Failed, "failed", false, "")
	fs.BoolVar(&a.JSON, "json", false, "")
	fs.BoolVar(&a.Wait, "wait", false, "")
	fs.BoolVar(&a.WaitForSync, "wait-for-sync", false, "")
	fs.StringVar(&f.addConfig, "add-config", "", "")
	fs.StringVar(&f.deleteConfig, "delete-config", "", "")
	fs.BoolVar(&a.Configs, "configs", false, "")
	fs.BoolVar(&a.Full, "full", false, "")
	fs.StringVar(&a.File, "f", "", "")
	fs.StringVar(&a.File, "file", "", "")
	fs.BoolVar(&a.AllowDestructive, "allow-destructive", false, "")
	fs.StringVar(&a.Route, "route", "", "")
	fs.BoolVar(&a.Force, "force", false, "")
	fs.DurationVar(&a.Timeout, "timeout", 60*time.Second, "")
	return f
}

// pickAction takes the one action given.
func (f *mirrorsFlags) pickAction(a *MirrorsArgs) error {
	var chosen []string
	for _, act := range actions {
		if *f.picked[act] {
			a.Action = act
			chosen = append(chosen, "--"+string(act))
		}
	}
	switch len(chosen) {
	case 0:
		return usagef("no action given; give exactly one of %s", actionList(actions))
	case 1:
		return nil
	}
	return usagef("%s given together; give exactly one action per command", strings.Join(chosen, " and "))
}

// checkApply refuses flags the action does not take, and a bad --timeout.
func (f *mirrorsFlags) checkApply(a *MirrorsArgs) error {
	if a.Bootstrap == "" {
		return usagef("--bootstrap-server is required: give the kmirror proxy's address, e.g. --bootstrap-server localhost:9092")
	}
	for _, name := range []string{"mirror", "mirror-config", "topics", "exclude", "failed", "json", "wait", "wait-for-sync", "add-config", "delete-config", "configs", "f", "allow-destructive", "full", "route", "force"} {
		if acts := flagUse[name]; f.set[name] && !hasAction(acts, a.Action) {
			return usagef("--%s does not apply to --%s (it is used with %s); remove it", name, a.Action, actionList(acts))
		}
	}
	if a.Timeout <= 0 {
		return usagef("--timeout %s must be positive, e.g. --timeout 2m", a.Timeout)
	}
	return nil
}

// checkNeeds asks for the flags the action cannot do without.
func (f *mirrorsFlags) checkNeeds(a *MirrorsArgs) error {
	needMirror := !hasAction([]Action{ActList, ActDescribe, ActApply, ActDiff, ActExport, ActSwitch}, a.Action)
	switch {
	case a.Action == ActSwitch && a.Route == "":
		return usagef("--switch needs --route NAME: a route of the kmirror proxy config (docs/cutover.md)")
	case (a.Action == ActApply || a.Action == ActDiff) && a.File == "":
		return usagef("--%s needs -f FILE: the mirrors file (kmirror mirrors --export -f FILE writes one for what exists)", a.Action)
	case a.Full && !a.Configs:
		return usagef("--full goes with --describe --configs: it shows config values whole")
	case needMirror && a.Mirror == "":
		return usagef("--%s needs --mirror NAME; `kmirror mirrors --list` shows the mirrors", a.Action)
	case f.set["mirror"] && a.Mirror == "":
		return usagef("--mirror is empty; give the mirror's name")
	case a.Action == ActRecoverState && a.MirrorConfig == "":
		return usagef("--recover-state needs --mirror-config FILE: the mirror's configs as given to --create (at least bootstrap.servers=SOURCE:PORT)")
	case a.Action == ActCreate && a.MirrorConfig == "":
		return usagef("--create needs --mirror-config FILE: a properties file with at least bootstrap.servers=SOURCE:PORT of the source cluster")
	case a.Action == ActDescribe && a.Configs && a.Mirror == "":
		return usagef("--describe --configs needs --mirror NAME")
	}
	return nil
}

// parseAlter reads --alter's --add-config and --delete-config.
func (f *mirrorsFlags) parseAlter(a *MirrorsArgs) error {
	if a.Action != ActAlter {
		return nil
	}
	var err error
	if a.AddConfig, err = parseKVs("--add-config", f.addConfig); err != nil {
		return err
	}
	for _, k := range strings.Split(f.deleteConfig, ",") {
		if k = strings.TrimSpace(k); k != "" {
			a.DeleteConfig = append(a.DeleteConfig, k)
		}
	}
	for _, kv := range a.AddConfig {
		if slices.Contains(a.DeleteConfig, kv.Key) {
			return usagef("%s is both in --add-config and --delete-config; keep one", kv.Key)
		}
	}
	if len(a.AddConfig) == 0 && len(a.DeleteConfig) == 0 && a.MirrorConfig == "" {
		return usagef("--alter needs --add-config K=V[,K=V], --delete-config K[,K] or --mirror-config FILE")
	}
	return nil
}

// parseTopics reads --topics of the actions on topics.
func (f *mirrorsFlags) parseTopics(a *MirrorsArgs) error {
	if a.WaitForSync {
		a.Wait = true // the LMOs are the point of a graceful promote
	}
	switch a.Action {
	case ActAdd, ActRemove, ActPause, ActResume:
	default:
		return nil
	}
	if !f.set["topics"] {
		return usagef("--%s needs --topics: topic names separated by commas, or one regular expression", a.Action)
	}
	sel, err := ParseTopics("--topics", f.topics)
	if err != nil {
		return err
	}
	if sel.IsPattern() && (a.Action == ActPause || a.Action == ActResume) {
		return usagef("--%s takes topic names, not a pattern (%q has characters topic names cannot have); list the topics separated by commas (--describe --mirror %s shows them)", a.Action, f.topics, a.Mirror)
	}
	if sel.IsPattern() && a.WaitForSync {
		// The proxy resolves a pattern when the failover is recorded:
		// a topic created while waiting would be failed over unsynced.
		return usagef("--wait-for-sync takes topic names, not a pattern (%q has characters topic names cannot have): a topic matching it that is created while waiting would be failed over without being in sync; list the topics separated by commas (--describe --mirror %s shows them)", f.topics, a.Mirror)
	}
	a.Topics = sel
	return nil
}

// parseExclude reads --exclude, which narrows a --topics pattern.
func (f *mirrorsFlags) parseExclude(a *MirrorsArgs) error {
	if !f.set["exclude"] {
		return nil
	}
	sel, err := ParseTopics("--exclude", f.exclude)
	if err != nil {
		return err
	}
	if sel.IsPattern() {
		a.Exclude = []string{sel.Pattern}
	} else {
		for _, n := range sel.Names {
			a.Exclude = append(a.Exclude, regexp.QuoteMeta(n))
		}
	}
	if !a.Topics.IsPattern() {
		return usagef("--exclude only narrows a --topics pattern, and --topics %q is a list of names; drop the names you do not want instead, or give --topics as a pattern", f.topics)
	}
	return nil
}

// KV is one key=value of --add-config.
type KV struct{ Key, Value string }

// parseKVs reads K=V[,K=V]. A value cannot hold a comma; a list value goes
// in --mirror-config's file instead.
func parseKVs(flagName, v string) ([]KV, error) {
	var out []KV
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		k, val, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, usagef("%s %q: give KEY=VALUE pairs separated by commas (a list value goes in a --mirror-config file)", flagName, part)
		}
		out = append(out, KV{strings.TrimSpace(k), strings.TrimSpace(val)})
	}
	return out, nil
}

// didYouMean suggests the closest flag for "flag provided but not defined".
// parseFlags parses the command line of fs (named "kmirror CMD"); -h
// writes helpText to help and returns flag.ErrHelp. A positional argument
// is refused with fix, which says where its value goes.
func parseFlags(fs *flag.FlagSet, args []string, help io.Writer, helpText, fix string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(help, helpText)
			return flag.ErrHelp
		}
		return usagef("%v%s; run '%s -h' for the flags", err, didYouMean(err, fs), fs.Name())
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q: %s", fs.Arg(0), fix)
	}
	return nil
}

func didYouMean(err error, fs *flag.FlagSet) string {
	const prefix = "flag provided but not defined: -"
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return ""
	}
	bad := strings.TrimLeft(strings.TrimPrefix(msg, prefix), "-")
	best, bestDist := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(bad, f.Name); d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	if best == "" {
		return ""
	}
	return " (did you mean --" + best + "?)"
}

// editDistance is the Levenshtein distance of two short strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func hasAction(acts []Action, a Action) bool {
	for _, x := range acts {
		if x == a {
			return true
		}
	}
	return false
}

func actionList(acts []Action) string {
	s := make([]string, len(acts))
	for i, a := range acts {
		s[i] = "--" + string(a)
	}
	return strings.Join(s, ", ")
}

// MirrorsHelp is `kmirror mirrors -h`.
const MirrorsHelp = `Usage: kmirror mirrors --bootstrap-server HOST:PORT [--command-config FILE] ACTION [flags]

Manage the mirrors of a kmirror proxy (Kafka Cluster Mirroring). Talks to the
proxy in front of the destination cluster, never to brokers directly.

Connection:
  --bootstrap-server HOST:PORT  the kmirror proxy (required)
  --command-config FILE         client properties: security.protocol, sasl.mechanism,
                                sasl.jaas.config (Plain/ScramLoginModule) or
                                sasl.username + sasl.password, ssl.ca.location or
                                ssl.truststore.location (PEM), ssl.certificate.location +
                                ssl.key.location or ssl.keystore.location (PEM),
                                ssl.endpoint.identification.algorithm, client.id
  --timeout DURATION            give up after this long (default 60s); reads, and
                                --remove, --pause and --resume, are asked again
                                within it while kmirror answers a retriable error
                                (COORDINATOR_NOT_AVAILABLE while a broker restarts);
                                with --wait, how long to wait for STOPPED; with
                                --wait-for-sync, how long to wait for sync, and then
                                for STOPPED

Actions (exactly one):
  --create --mirror M --mirror-config FILE
        create mirror M; FILE holds mirror configs (bootstrap.servers of the source,
        security, topics.include, ...). source.cluster.id is filled in by asking the
        source cluster when absent. A sasl.jaas.config line is sent as
        sasl.username + sasl.password. Secrets are never stored in clear: give
        sasl.password as a reference every instance resolves itself,
        ${file:/PATH.properties:KEY}, ${env:NAME} or ${directory:DIR:FILE}, or
        literally to instances started with --secrets-key-file, which store it
        encrypted (docs/SECURITY.md, "Secrets").
  --add --mirror M --topics TOPICS [--exclude TOPICS]
        start mirroring topics. A pattern is also stored with the mirror, so
        matching source topics created later are mirrored too; --exclude narrows it.
  --remove --mirror M --topics TOPICS [--wait]
        fail the topics over: they stop mirroring and become writable once STOPPED.
        --wait polls until every partition is STOPPED (bounded by --timeout).
  --remove --mirror M --topics NAMES --wait-for-sync [--timeout D]
        graceful promote: first wait until every partition of the topics is
        MIRRORING with nothing at risk (0 records: the destination has caught up
        with the source high watermark; the copy stops at the source's last stable
        offset, so this also means no source transaction is open on them), then
        fail over and wait for STOPPED as --wait does, printing the LMOs. Stop the
        producers on the source first: a record written after the check is not
        waited for (a warning names partitions whose source moved past the LMO).
        If --timeout passes first, nothing is sent and the topics stay read-only
        mirrors: it prints what a failover would lose per partition and in total,
        and exits 1. Implies --wait; takes names, not a pattern.
  --switch --route R [--force]
        switch route R (docs/cutover.md): applications bootstrapped to the route
        keep their address while it moves from the primary to the standby, or,
        switched, back to the primary (once the kmirror in front of the primary
        runs a mirror of the standby's topics: a failback). A
        planned switch freezes the route's writes to the mirror's topics, drains
        the mirror (nothing at risk), copies the consumer groups' offsets, fails
        the topics over and switches; it rolls back, unfrozen, if a step cannot
        finish in time. --force (the primary is gone) skips the freeze, the drain
        and the group copy: what was not copied is lost. Returns once the switch
        started (its attempt) or was refused; the state record shows its steps.
  --pause --mirror M --topics NAMES     stop copying, keep the topics read-only
  --resume --mirror M --topics NAMES    continue copying paused topics
  --list [--json]                       list mirrors
  --describe [--mirror M] [--failed] [--json]
        per partition: state, source and destination high watermarks, lag, last
        mirrored offset (LMO), what a failover right now would lose and any error;
        --failed shows FAILED partitions only, with their retry attempt. Then the
        recovery point per topic, per mirror and per consumer group (how old its
        synced offsets are).
        AT-RISK-RECORDS: source high watermark minus destination log end (an open
        source transaction counts: the copy waits for it to end). AT-RISK-SECONDS:
        age of the oldest of those records by its own timestamp (CreateTime, set
        by the producer: a producer's wrong clock makes it wrong too). - where
        unknown, or the partition already fails over (STOPPING, STOPPED).
  --delete --mirror M                   delete a mirror whose topics are all STOPPED
  --alter --mirror M [--add-config K=V[,K=V]] [--delete-config K[,K]] [--mirror-config FILE]
        change a mirror's configs while it runs (replication.throttled.rate applies
        within a second; patterns, group and ACL filters at the next refresh; fetch
        sizes when copies restart). --delete-config puts a key back to its default;
        FILE's lines are set too. The keys naming the source (bootstrap.servers,
        source.cluster.id, security.protocol, sasl.*, ssl.*) cannot change. Every
        alter re-saves the mirror's secrets with the answering instance's current
        key (after a key rotation, or to encrypt one an older kmirror stored in clear).
  --describe --mirror M --configs [--full]
        the mirror's configs, with defaults; long values are shortened to fit
        a terminal (…), --full prints them whole
  --recover-state --mirror M --mirror-config FILE
        rebuild mirror M after its state was lost (__mirror_state deleted or
        re-created straight at a broker; --list and --describe then say
        MIRROR STATE LOST and its topics stay read-only). FILE holds the mirror's
        configs as given to --create. The topics kmirror still knows as M's are
        mirrored again from their destination log ends: nothing is copied twice.
        Add include patterns again with --add afterwards.

Mirrors as code (docs/mirrors-as-code.md):
  --apply -f FILE [--allow-destructive]
        make the mirrors what FILE (YAML) declares: create missing mirrors, add
        missing topics, set configs that differ, put configs the file leaves out
        back to their defaults, resume topics the file does not pause. Prints
        each change; a second apply prints "No changes". It pauses, fails over
        (failed_over:) and deletes (deleted: true) only what the file says to,
        and only with --allow-destructive; without it, it changes nothing.
  --diff -f FILE                        what --apply would change (- and ! mark
                                        destructive changes); changes nothing
  --export [-f FILE]                    write the file for what exists (stdout
                                        without -f); secrets as ${env:...}
                                        references to fill in, never values

TOPICS is either topic names separated by commas (orders,payments), or, when the
value has any character a topic name cannot have, ONE regular expression matched
against whole names ('orders-.*', 'orders|payments-v[0-9]+'). A '.' alone does not
make a pattern; write '(orders.v.)' to force one.

Results go to stdout; failures go to stderr, one per line, as
"error: topic T: ERROR_NAME: message" (or "ERROR_NAME: message" for the request).
Exit status: 0 on success, 1 if the request or any topic failed, 2 for a usage error.
`
