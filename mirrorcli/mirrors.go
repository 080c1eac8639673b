package mirrorcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/secrets"
	"github.com/kmirror/kmirror/coordinator/sourceclient"
	pluralpkg "github.com/kmirror/kmirror/internal/plural"
	"github.com/kmirror/kmirror/protocol"
)

// Mirrors runs `kmirror mirrors` with args (after the command name).
func Mirrors(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a, err := ParseMirrorsArgs(args, stdout)
	if err != nil {
		return err
	}
	return RunMirrors(ctx, a, stdout, stderr)
}

// RunMirrors runs a parsed command line.
func RunMirrors(ctx context.Context, a *MirrorsArgs, stdout, stderr io.Writer) error {
	sec, err := loadCommandConfig(a.CommandConfig)
	if err != nil {
		return &UsageError{err.Error()}
	}
	r := &runner{a: a, out: stdout, errw: stderr}
	// Read the mirror config before connecting, so a bad file is reported
	// without waiting on the network.
	var configs []protocol.CreateMirrorRequestConfig
	if a.Action == ActCreate || a.Action == ActRecoverState || (a.Action == ActAlter && a.MirrorConfig != "") {
		if configs, err = readMirrorConfig(a.MirrorConfig); err != nil {
			return err
		}
	}
	var file *MirrorsFile
	if a.Action == ActApply || a.Action == ActDiff {
		if file, err = readMirrorsFile(a.File); err != nil {
			return err
		}
	}
	r.c, err = newClient(a.Bootstrap, a.Timeout, sec)
	if err != nil {
		return err
	}
	defer r.c.close()
	total := a.Timeout
	if a.WaitForSync {
		// --timeout bounds the wait for sync; the failover that follows
		// gets a --timeout of its own to reach STOPPED.
		total = 2 * a.Timeout
	}
	ctx, cancel := context.WithTimeout(ctx, total)
	defer cancel()

	switch a.Action {
	case ActCreate:
		return r.create(ctx, configs)
	case ActAdd:
		return r.add(ctx)
	case ActRemove:
		return r.remove(ctx)
	case ActPause, ActResume:
		return r.pauseResume(ctx)
	case ActList:
		return r.list(ctx)
	case ActDescribe:
		if a.Configs {
			return r.describeConfigs(ctx)
		}
		return r.describe(ctx)
	case ActDelete:
		return r.delete(ctx)
	case ActAlter:
		return r.alter(ctx, configs)
	case ActRecoverState:
		return r.recoverState(ctx, configs)
	case ActApply:
		return r.apply(ctx, file)
	case ActDiff:
		return r.diff(ctx, file)
	case ActExport:
		return r.export(ctx)
	case ActSwitch:
		return r.switchRoute(ctx)
	}
	return usagef("unknown action %q", a.Action)
}

type runner struct {
	a    *MirrorsArgs
	c    *client
	out  io.Writer
	errw io.Writer
}

// readMirrorConfig reads --mirror-config. A Java-style sasl.jaas.config line
// (the mirror has no such key) becomes sasl.username and sasl.password.
func readMirrorConfig(path string) ([]protocol.CreateMirrorRequestConfig, error) {
	props, err := ReadProperties(path)
	if err != nil {
		return nil, usagef("--mirror-config: %v", err)
	}
	var out []protocol.CreateMirrorRequestConfig
	has := map[string]bool{}
	for _, p := range props {
		has[p.Key] = true
	}
	for _, p := range props {
		if p.Key != "sasl.jaas.config" {
			out = append(out, protocol.CreateMirrorRequestConfig{Name: p.Key, Value: strPtr(p.Value)})
			continue
		}
		if has["sasl.username"] || has["sasl.password"] {
			return nil, usagef("--mirror-config %s line %d: both sasl.jaas.config and sasl.username/sasl.password are set; keep one", path, p.Line)
		}
		j, err := parseJAAS(p.Value)
		if err != nil {
			return nil, usagef("--mirror-config %s line %d: %v", path, p.Line, err)
		}
		out = append(out,
			protocol.CreateMirrorRequestConfig{Name: "sasl.username", Value: strPtr(j.user)},
			protocol.CreateMirrorRequestConfig{Name: "sasl.password", Value: strPtr(j.pass)})
	}
	if len(out) == 0 {
		return nil, usagef("--mirror-config %s has no configs; it needs at least bootstrap.servers=HOST:PORT of the source cluster", path)
	}
	return out, nil
}

func strPtr(s string) *string { return &s }

// sourceLookupTimeout bounds asking the source for its cluster id.
const sourceLookupTimeout = 15 * time.Second

func (r *runner) create(ctx context.Context, configs []protocol.CreateMirrorRequestConfig) error {
	m := map[string]string{}
	for _, c := range configs {
		m[c.Name] = *c.Value
	}
	// Configs the mirror would refuse are not used to connect; the proxy
	// names the bad key in its answer.
	if m["source.cluster.id"] == "" && mirrorconfig.Validate(m) == nil {
		id, err := lookupSourceClusterID(ctx, r.a.Mirror, m)
		switch {
		case err != nil:
			fmt.Fprintf(r.errw, "warning: source.cluster.id not filled in: %v; the proxy checks the source itself\n", err)
		default:
			configs = append(configs, protocol.CreateMirrorRequestConfig{Name: "source.cluster.id", Value: strPtr(id)})
			m["source.cluster.id"] = id
		}
	}
	req := &protocol.CreateMirrorRequest{MirrorName: r.a.Mirror, Configs: configs}
	if _, err := send[*protocol.CreateMirrorResponse](ctx, r.c, req); err != nil {
		return err
	}
	id := m["source.cluster.id"]
	if id == "" {
		id = "looked up by the proxy"
	}
	fmt.Fprintf(r.out, "Created mirror %s from source cluster %s (cluster id %s).\n", r.a.Mirror, m["bootstrap.servers"], id)
	return nil
}

// recoverState sends CreateMirror with RecoverState: the proxy records the
// mirror again with these configs and the topics it still knows as the
// mirror's, which continue from their destination log ends.
func (r *runner) recoverState(ctx context.Context, configs []protocol.CreateMirrorRequestConfig) error {
	req := &protocol.CreateMirrorRequest{MirrorName: r.a.Mirror, Configs: configs, RecoverState: true}
	if _, err := send[*protocol.CreateMirrorResponse](ctx, r.c, req); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "Recovered mirror %s: its topics are mirrored again from their destination log ends; `kmirror mirrors --describe --mirror %s` shows them.\n", r.a.Mirror, r.a.Mirror)
	return nil
}

// lookupSourceClusterID asks the source cluster named by the mirror configs
// for its id, with the mirror's own security configs.
func lookupSourceClusterID(ctx context.Context, mirror string, configs map[string]string) (string, error) {
	// References are resolved here, from this machine's files and
	// environment; the proxy resolves them again on its own.
	resolved, err := secrets.NewResolver(nil).Resolve(mirror, configs)
	if err != nil {
		return "", err
	}
	opts, err := sourceclient.Options(mirrorconfig.Parse(resolved))
	if err != nil {
		return "", err
	}
	cl, err := kgo.NewClient(append(opts, kgo.ClientID("kmirror-mirrors"))...)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, sourceLookupTimeout)
	defer cancel()
	id, err := sourceclient.ClusterID(ctx, cl)
	if err != nil {
		return "", fmt.Errorf("cannot reach the source cluster at %s from here: %w", configs["bootstrap.servers"], err)
	}
	return id, nil
}

// topicResults prints per-topic outcomes: successes to stdout with ok,
// failures to stderr as "error: topic T: NAME: message". It returns an
// error when any topic failed.
func (r *runner) topicResults(results []protocol.TopicResult, ok func(name string) string) error {
	failed := 0
	for _, t := range results {
		if err := protocol.ResponseError(t.ErrorCode, t.ErrorMessage); err != nil {
			failed++
			fmt.Fprintf(r.errw, "error: topic %s: %v\n", t.Name, err)
			continue
		}
		fmt.Fprintln(r.out, ok(t.Name))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %s failed", failed, plural(len(results), "topic"))
	}
	return nil
}

func (r *runner) add(ctx context.Context) error {
	req := &protocol.AddTopicsToMirrorRequest{MirrorName: r.a.Mirror, ExcludePatterns: r.a.Exclude}
	if r.a.Topics.IsPattern() {
		req.IncludePatterns = []string{r.a.Topics.Pattern}
	}
	for _, n := range r.a.Topics.Names {
		t := protocol.NewAddTopicsToMirrorRequestTopic() // id and partitions looked up by the proxy
		t.Name = n
		req.Topics = append(req.Topics, t)
	}
	ar, err := send[*protocol.AddTopicsToMirrorResponse](ctx, r.c, req)
	if err != nil {
		return err
	}
	err = r.topicResults(ar.Topics, func(n string) string { return fmt.Sprintf("Topic %s: added to mirror %s.", n, r.a.Mirror) })
	if r.a.Topics.IsPattern() {
		if len(ar.Topics) == 0 {
			fmt.Fprintf(r.out, "No source topic matches %s yet.\n", r.a.Topics)
		}
		fmt.Fprintf(r.out, "Pattern %s is stored with mirror %s: matching source topics created later are mirrored too.\n", r.a.Topics, r.a.Mirror)
	}
	return err
}

func (r *runner) remove(ctx context.Context) error {
	if r.a.WaitForSync {
		if err := r.waitSynced(ctx, r.a.Topics.Names); err != nil {
			return err
		}
	}
	req := &protocol.RemoveTopicsFromMirrorRequest{MirrorName: r.a.Mirror}
	if r.a.Topics.IsPattern() {
		req.Patterns = []string{r.a.Topics.Pattern}
	}
	for _, n := range r.a.Topics.Names {
		req.Topics = append(req.Topics, protocol.TopicName{Name: n})
	}
	rr, err := sendAgain[*protocol.RemoveTopicsFromMirrorResponse](ctx, r.c, req)
	if err != nil {
		return err
	}
	if r.a.Topics.IsPattern() && len(rr.Topics) == 0 {
		fmt.Fprintf(r.out, "No topic of mirror %s matches %s.\n", r.a.Mirror, r.a.Topics)
	}
	topicErr := r.topicResults(rr.Topics, func(n string) string {
		return fmt.Sprintf("Topic %s: failover requested; it becomes writable once every partition is STOPPED.", n)
	})
	if !r.a.Wait {
		return topicErr
	}
	var wait []string
	for _, t := range rr.Topics {
		if t.ErrorCode == 0 {
			wait = append(wait, t.Name)
		}
	}
	stopped, err := r.waitStopped(ctx, wait)
	if err == nil && r.a.WaitForSync {
		r.warnPastLMO(stopped)
	}
	return errors.Join(topicErr, err)
}

// warnPastLMO names the partitions whose source moved past the last
// mirrored offset after the sync check: those records were written to the
// source after it and are not on the destination.
func (r *runner) warnPastLMO(resp *protocol.DescribeMirrorsResponse) {
	for _, m := range resp.Mirrors {
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				if p.LastMirroredOffset >= 0 && p.SourceHighWatermark > p.LastMirroredOffset {
					fmt.Fprintf(r.errw, "warning: %s-%d: the source high watermark is %d, %d past the LMO %d: records written to the source after the sync check are not on the destination; stop the producers on the source before promoting\n",
						t.Name, p.Partition, p.SourceHighWatermark, p.SourceHighWatermark-p.LastMirroredOffset, p.LastMirroredOffset)
				}
			}
		}
	}
}

// inSync reports whether a partition can fail over without losing
// anything: MIRRORING, and the destination has every source offset.
func inSync(p *protocol.DescribeMirrorsResponsePartition) bool {
	return p.State == protocol.MirrorStateMirroring.String() && p.RecordsAtRisk == 0
}

// notInSync says why a partition is not in sync, for the progress line.
func notInSync(topic string, p *protocol.DescribeMirrorsResponsePartition) string {
	switch {
	case p.RecordsAtRisk < 0:
		return fmt.Sprintf("%s-%d %s, records at risk unknown", topic, p.Partition, p.State)
	case p.RecordsAtRisk == 0:
		return fmt.Sprintf("%s-%d %s", topic, p.Partition, p.State)
	}
	return fmt.Sprintf("%s-%d %s, %s at risk", topic, p.Partition, p.State, plural(int(p.RecordsAtRisk), "record"))
}

// waitSynced polls DescribeMirrors until every partition of topics is in
// sync, for at most --timeout. On timeout it prints what a failover would
// lose and returns an error: the caller then sends nothing.
func (r *runner) waitSynced(ctx context.Context, topics []string) error {
	ctx, cancel := context.WithTimeout(ctx, r.a.Timeout)
	defer cancel()
	began := time.Now()
	w := &waiter{out: r.out}
	var last *protocol.DescribeMirrorsResponse
	for {
		resp, err := r.describeOnce(ctx, []string{r.a.Mirror})
		switch {
		case err != nil && last != nil && ctx.Err() != nil:
			return r.syncTimedOut(last, topics)
		case err != nil:
			return fmt.Errorf("%w; nothing was sent, the topics still mirror", err)
		}
		if errs := MirrorErrors(resp); len(errs) > 0 {
			return fmt.Errorf("%s; nothing was sent", errs[0])
		}
		last = filterTopics(resp, topics)
		described := map[string]*protocol.DescribeMirrorsResponseTopic{}
		for i := range last.Mirrors[0].Topics {
			described[last.Mirrors[0].Topics[i].Name] = &last.Mirrors[0].Topics[i]
		}
		total, synced := 0, 0
		var pending []string
		for _, name := range topics {
			t := described[name]
			if t == nil {
				return fmt.Errorf("topic %s is not in mirror %s; nothing was sent (--describe --mirror %s lists its topics)", name, r.a.Mirror, r.a.Mirror)
			}
			for i := range t.Partitions {
				p := &t.Partitions[i]
				if p.FailingOver() {
					return fmt.Errorf("topic %s is already failing over (partition %d is %s): there is no sync left to wait for; nothing was sent. Drop it from --topics, or follow it with --remove --wait",
						name, p.Partition, p.State)
				}
				total++
				if inSync(p) {
					synced++
				} else {
					pending = append(pending, notInSync(name, p))
				}
			}
		}
		if len(pending) == 0 {
			fmt.Fprintf(r.out, "All %s of %s in sync (nothing at risk) after %s; failing over.\n", plural(total, "partition"), strings.Join(topics, ", "), time.Since(began).Round(time.Millisecond))
			return nil
		}
		w.progress(fmt.Sprintf("Waiting for sync: %d of %s in sync; pending: %s", synced, plural(total, "partition"), strings.Join(truncate(pending, 5), "; ")))
		if !w.pause(ctx) {
			return r.syncTimedOut(last, topics)
		}
	}
}

// syncTimedOut prints, from the last describe, what a failover would lose
// per partition and in total, and returns the error that ends the command.
func (r *runner) syncTimedOut(resp *protocol.DescribeMirrorsResponse, topics []string) error {
	fmt.Fprintf(r.out, "Not failing over: after --timeout %s these partitions are not in sync; a failover now would lose:\n", r.a.Timeout)
	tw := newTable(r.out)
	tw.row(SyncWaitColumns...)
	m := resp.Mirrors[0]
	for _, t := range m.Topics {
		for i := range t.Partitions {
			p := &t.Partitions[i]
			if !inSync(p) {
				tw.row(t.Name, strconv.Itoa(int(p.Partition)), p.State, offset(p.RecordsAtRisk), seconds(p.AtRiskAgeMs))
			}
		}
	}
	risk := m.AtRisk()
	rec, sec := riskCells(risk)
	tw.row("TOTAL", "-", "-", rec, sec)
	if err := tw.flush(); err != nil {
		return err
	}
	var what string
	switch {
	case risk.Records > 0:
		what = fmt.Sprintf("a failover now would lose %s (the oldest %ss old)", plural(int(risk.Records), "record"), seconds(risk.AgeMs))
		if risk.Unknown > 0 {
			what += fmt.Sprintf(", or more: the figures of %s are unknown", plural(risk.Unknown, "partition"))
		}
	case risk.Unknown > 0:
		what = fmt.Sprintf("what a failover now would lose is unknown for %s (a cluster did not answer)", plural(risk.Unknown, "partition"))
	default:
		what = "no records are at risk, but not every partition is MIRRORING (see STATE)"
	}
	return fmt.Errorf("timed out after --timeout %s waiting for %s to be in sync: %s; nothing was sent, the topics still mirror and stay read-only. "+
		"Stop the producers and end (commit or abort) open transactions on the source, resume PAUSED topics, fix FAILED partitions (--describe --mirror %s), or raise --timeout; --remove --wait fails over without waiting",
		r.a.Timeout, strings.Join(topics, ", "), what, r.a.Mirror)
}

// SyncWaitColumns are the columns of the table --wait-for-sync prints when
// it gives up.
var SyncWaitColumns = []string{"TOPIC", "PARTITION", "STATE", "AT-RISK-RECORDS", "AT-RISK-SECONDS"}

// filterTopics keeps the first mirror of resp and, of it, only the topics
// named.
func filterTopics(resp *protocol.DescribeMirrorsResponse, topics []string) *protocol.DescribeMirrorsResponse {
	want := map[string]bool{}
	for _, t := range topics {
		want[t] = true
	}
	out := &protocol.DescribeMirrorsResponse{}
	for _, m := range resp.Mirrors {
		fm := protocol.DescribeMirrorsResponseMirror{Name: m.Name}
		for _, t := range m.Topics {
			if want[t.Name] {
				fm.Topics = append(fm.Topics, t)
			}
		}
		out.Mirrors = append(out.Mirrors, fm)
	}
	if len(out.Mirrors) == 0 {
		out.Mirrors = []protocol.DescribeMirrorsResponseMirror{{}}
	}
	return out
}

// waitStopped polls DescribeMirrors until every partition of topics is
// STOPPED, printing progress when it changes, then prints their rows (with
// the last mirrored offsets).
func (r *runner) waitStopped(ctx context.Context, topics []string) (*protocol.DescribeMirrorsResponse, error) {
	if len(topics) == 0 {
		return &protocol.DescribeMirrorsResponse{}, nil
	}
	want := map[string]bool{}
	for _, t := range topics {
		want[t] = true
	}
	began := time.Now()
	w := &waiter{out: r.out}
	for {
		resp, err := r.describeOnce(ctx, []string{r.a.Mirror})
		if err != nil {
			return nil, err
		}
		if errs := MirrorErrors(resp); len(errs) > 0 {
			if !onlyRetriable(resp) {
				return nil, errors.New(errs[0])
			}
			// The state is not readable for a moment (a destination broker restarting): the
			// failover was asked for and goes on; keep waiting rather than fail the command.
			w.progress("Waiting for failover: " + errs[0] + "; asking again")
			if !w.pause(ctx) {
				return nil, fmt.Errorf("timed out after --timeout %s, the last answer: %s; run --describe --mirror %s to follow the failover, or raise --timeout",
					r.a.Timeout, errs[0], r.a.Mirror)
			}
			continue
		}
		stopped, total, pending, seen := 0, 0, []string{}, map[string]bool{}
		filtered := &protocol.DescribeMirrorsResponse{}
		for _, m := range resp.Mirrors {
			fm := protocol.DescribeMirrorsResponseMirror{Name: m.Name}
			for _, t := range m.Topics {
				if !want[t.Name] {
					continue
				}
				seen[t.Name] = true
				fm.Topics = append(fm.Topics, t)
				for _, p := range t.Partitions {
					total++
					if p.State == protocol.MirrorStateStopped.String() {
						stopped++
					} else {
						pending = append(pending, fmt.Sprintf("%s-%d %s", t.Name, p.Partition, p.State))
					}
				}
			}
			filtered.Mirrors = append(filtered.Mirrors, fm)
		}
		for t := range want {
			if !seen[t] {
				pending = append(pending, t+" (not described)")
			}
		}
		sort.Strings(pending)
		if len(pending) == 0 {
			fmt.Fprintf(r.out, "All %s of %s STOPPED after %s:\n", plural(total, "partition"), strings.Join(topics, ", "), time.Since(began).Round(time.Millisecond))
			// The partitions only: totals over some of a mirror's topics
			// would read as the mirror's.
			return filtered, renderPartitions(r.out, filtered, false)
		}
		w.progress(fmt.Sprintf("Waiting for failover: %d of %s STOPPED; pending: %s", stopped, plural(total, "partition"), strings.Join(truncate(pending, 5), ", ")))
		if !w.pause(ctx) {
			return nil, fmt.Errorf("timed out after --timeout %s: %d of %s not STOPPED yet (%s); run --describe --mirror %s to follow them, or raise --timeout",
				r.a.Timeout, len(pending), plural(total, "partition"), strings.Join(truncate(pending, 5), ", "), r.a.Mirror)
		}
	}
}

// onlyRetriable reports whether every mirror error of resp is one a later describe may not
// have (COORDINATOR_NOT_AVAILABLE while the state is unreadable, and the like).
func onlyRetriable(resp *protocol.DescribeMirrorsResponse) bool {
	for _, m := range resp.Mirrors {
		if e := protocol.ErrorForCode(m.ErrorCode); e != nil && !e.Retriable {
			return false
		}
	}
	return true
}

func plural(n int, what string) string { return pluralpkg.Of(n, what) }

func truncate(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(append([]string(nil), s[:n]...), fmt.Sprintf("and %d more", len(s)-n))
}

func (r *runner) pauseResume(ctx context.Context) error {
	topics := make([]protocol.TopicName, 0, len(r.a.Topics.Names))
	for _, n := range r.a.Topics.Names {
		topics = append(topics, protocol.TopicName{Name: n})
	}
	var req kmsg.Request
	verb := "paused (copying stops; the topic stays read-only)"
	if r.a.Action == ActPause {
		req = &protocol.PauseMirrorTopicsRequest{MirrorName: r.a.Mirror, Topics: topics}
	} else {
		req = &protocol.ResumeMirrorTopicsRequest{MirrorName: r.a.Mirror, Topics: topics}
		verb = "resumed"
	}
	resp, err := sendAgain[kmsg.Response](ctx, r.c, req)
	if err != nil {
		return err
	}
	var results []protocol.TopicResult
	switch resp := resp.(type) {
	case *protocol.PauseMirrorTopicsResponse:
		results = resp.Topics
	case *protocol.ResumeMirrorTopicsResponse:
		results = resp.Topics
	}
	return r.topicResults(results, func(n string) string { return fmt.Sprintf("Topic %s: %s.", n, verb) })
}

func (r *runner) list(ctx context.Context) error {
	lr, err := read[*protocol.ListMirrorsResponse](ctx, r.c, &protocol.ListMirrorsRequest{IncludeTopicNames: r.a.JSON})
	if err != nil {
		return err
	}
	if r.a.JSON {
		return RenderListJSON(r.out, lr)
	}
	return RenderListTable(r.out, lr)
}

func (r *runner) describeOnce(ctx context.Context, names []string) (*protocol.DescribeMirrorsResponse, error) {
	return read[*protocol.DescribeMirrorsResponse](ctx, r.c, &protocol.DescribeMirrorsRequest{MirrorNames: names})
}

func (r *runner) describe(ctx context.Context) error {
	var names []string
	if r.a.Mirror != "" {
		names = []string{r.a.Mirror}
	}
	dr, err := r.describeOnce(ctx, names)
	if err != nil {
		return err
	}
	errs := MirrorErrors(dr)
	switch {
	case r.a.JSON:
		err = RenderDescribeJSON(r.out, dr, r.a.Failed)
	case len(errs) > 0 && len(errs) == len(dr.Mirrors):
		// Nothing to tabulate: the errors alone, not an empty table's header.
	default:
		err = RenderDescribeTable(r.out, dr, r.a.Failed)
	}
	if err != nil {
		return err
	}
	for _, e := range errs {
		fmt.Fprintf(r.errw, "error: %s\n", e)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d of %s could not be described", len(errs), plural(len(dr.Mirrors), "mirror"))
	}
	return nil
}

func (r *runner) delete(ctx context.Context) error {
	if _, err := send[*protocol.DeleteMirrorResponse](ctx, r.c, &protocol.DeleteMirrorRequest{MirrorName: r.a.Mirror}); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "Deleted mirror %s; its topics stay on the destination as ordinary topics.\n", r.a.Mirror)
	return nil
}

// switchRoute asks for a route switch and says which attempt started.
func (r *runner) switchRoute(ctx context.Context) error {
	resp, err := send[*protocol.SwitchRouteResponse](ctx, r.c, &protocol.SwitchRouteRequest{RouteName: r.a.Route, Force: r.a.Force})
	if err != nil {
		return err
	}
	kind := "planned"
	if r.a.Force {
		kind = "forced"
	}
	fmt.Fprintf(r.out, "Started the %s switch of route %s (attempt %d); `kmirror mirrors --describe` shows its steps.\n", kind, r.a.Route, resp.Attempt)
	return nil
}

// waiter paces the CLI's wait loops: a progress line only when it changes,
// and pauses from 100ms doubling up to a second.
type waiter struct {
	out  io.Writer
	last string
	wait time.Duration
}

func (w *waiter) progress(line string) {
	if line != w.last {
		fmt.Fprintln(w.out, line)
		w.last = line
	}
}

// pause waits before the next look; false when ctx ended first.
func (w *waiter) pause(ctx context.Context) bool {
	if w.wait == 0 {
		w.wait = 100 * time.Millisecond
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(w.wait):
	}
	w.wait = min(2*w.wait, time.Second)
	return true
}
