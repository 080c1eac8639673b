// Package mirrorconfig is the one list of mirror-level configuration keys
// (given to CreateMirror): their defaults, their validation and their typed
// form. An unknown key is refused and named, so a typo never silently
// becomes a default.
package mirrorconfig

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kmirror/kmirror/coordinator/aclfilter"
	"github.com/kmirror/kmirror/internal/clientid"
)

// Key kinds, for validation.
type kind int

const (
	kString kind = iota
	kInt
	kBool
	kRegexList
	kList
	kEnum
	kACLRules
	kClientID
)

type spec struct {
	kind     kind
	def      string
	min      int64
	enum     []string
	doc      string
	secret   bool
	required bool
	// zeroDerived: 0 is accepted below min and means a value derived from
	// other keys (fetch.response.max.bytes: fetcher.ResponseBytes).
	zeroDerived bool
}

// specs is every key a mirror accepts.
var specs = map[string]spec{
	"bootstrap.servers":                     {kind: kString, required: true, doc: "source cluster bootstrap servers, host:port[,host:port]"},
	"source.cluster.id":                     {kind: kString, doc: "expected source cluster id; filled in by the CLI when absent and checked on every refresh"},
	"source.client.id":                      {kind: kClientID, doc: "client id of every connection to the source for this mirror (default kmirror-<mirror>), what a source quota names: kafka-configs --alter --entity-type clients --entity-name <id> --add-config consumer_byte_rate=<bytes/s>"},
	"security.protocol":                     {kind: kEnum, def: "PLAINTEXT", enum: []string{"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}, doc: "how to reach the source"},
	"sasl.mechanism":                        {kind: kEnum, def: "PLAIN", enum: []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}, doc: "SASL mechanism towards the source"},
	"sasl.username":                         {kind: kString, doc: "SASL user"},
	"sasl.password":                         {kind: kString, secret: true, doc: "SASL password"},
	"ssl.ca.location":                       {kind: kString, doc: "PEM file of CAs that sign the source brokers' certificates"},
	"ssl.certificate.location":              {kind: kString, doc: "PEM client certificate for mutual TLS"},
	"ssl.key.location":                      {kind: kString, doc: "PEM client key for mutual TLS"},
	"ssl.endpoint.identification.algorithm": {kind: kEnum, def: "https", enum: []string{"https", ""}, doc: "https verifies the broker host name; empty disables it"},
	"topics.include":                        {kind: kRegexList, doc: "regexes of source topics to mirror, also ones created later"},
	"topics.exclude":                        {kind: kRegexList, def: "__.*", doc: "regexes of source topics never mirrored; wins over include"},
	"groups.include":                        {kind: kRegexList, def: ".*", doc: "consumer groups whose offsets are synced"},
	"groups.exclude":                        {kind: kRegexList, doc: "consumer groups never synced; wins over include"},
	"acls.include": {kind: kACLRules, doc: "source ACLs created on the destination when missing (never deleted there): comma-separated " +
		"rules resourceType;resourceName;operation;permissionType;principal, `*` for any, trailing fields optional, names and principals " +
		"are regexes; TOPIC, GROUP and TRANSACTIONAL_ID only; empty (the default) syncs no ACLs"},
	"topic.properties.exclude": {kind: kList, doc: "topic configs never copied to the destination",
		def: "follower.replication.throttled.replicas,leader.replication.throttled.replicas,message.timestamp.type," +
			"message.timestamp.difference.max.ms,message.timestamp.before.max.ms,message.timestamp.after.max.ms," +
			"unclean.leader.election.enable,min.insync.replicas"},
	"fetch.max.bytes":                 {kind: kInt, def: "1048576", min: 1024, doc: "bytes fetched per partition per request; when the partitions one of a broker's fetch.max.in.flight fetches takes are fewer than fetch.response.max.bytes has room for, each gets an equal share of it (at most an eighth of copy.buffer.max.bytes)"},
	"fetch.response.max.bytes":        {kind: kInt, def: "0", min: 1024, zeroDerived: true, doc: "bytes per fetch response; 0 (the default) = copy.buffer.max.bytes ÷ fetch.max.in.flight (16 MiB for the defaults), at least fetch.max.bytes and at most 50 MiB, so that the Fetches in flight can fill the copy buffer, and raising copy.buffer.max.bytes raises it"},
	"fetch.wait.max.ms":               {kind: kInt, def: "500", min: 0, doc: "longest wait of a fetch for new data"},
	"fetch.max.in.flight":             {kind: kInt, def: "8", min: 1, doc: "Fetch requests in flight to one source broker at once, each for a disjoint share of its partitions and over a connection of its own (fills a long link; in-flight bytes stay within copy.buffer.max.bytes)"},
	"metadata.refresh.interval.ms":    {kind: kInt, def: "30000", min: 100, doc: "how often source topics, patterns, topic configs, consumer group offsets and ACLs are synced"},
	"replication.throttled.rate":      {kind: kInt, def: "0", min: 0, doc: "bytes/s copied for this mirror; 0 = unlimited"},
	"copy.buffer.max.bytes":           {kind: kInt, def: "134217728", min: 1048576, doc: "fetched but not yet written bytes one instance holds for this mirror (memory bound); at least fetch.max.bytes"},
	"failed.retry.initial.backoff.ms": {kind: kInt, def: "1000", min: 1, doc: "first wait before retrying a FAILED partition"},
	"failed.retry.max.backoff.ms":     {kind: kInt, def: "300000", min: 1, doc: "longest wait between retries"},
	"failed.retry.max.attempts":       {kind: kInt, def: "0", min: 0, doc: "retries before a partition needs the operator; 0 = unlimited"},
}

// Keys lists the accepted keys, sorted.
func Keys() []string {
	keys := make([]string, 0, len(specs))
	for k := range specs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Doc is a key's one-line description.
func Doc(key string) string { return specs[key].doc }

// Default is a key's default value ("" when it has none).
func Default(key string) string { return specs[key].def }

// DefaultFor is a key's default for the named mirror: Default, except where
// the default derives from the name (source.client.id, clientid.Source).
func DefaultFor(mirror, key string) string {
	if key == "source.client.id" {
		return clientid.Source(mirror, "")
	}
	return Default(key)
}

// IsConnection reports whether a key says where the source is, how to
// reach it or who kmirror says it is there (the client id source quotas
// name). Such keys are fixed once the mirror exists: its clients and
// copies are built from them (delete and re-create the mirror to change
// them); every other key can change while the mirror runs.
func IsConnection(key string) bool {
	switch {
	case key == "bootstrap.servers", key == "source.cluster.id", key == "security.protocol", key == "source.client.id",
		strings.HasPrefix(key, "sasl."), strings.HasPrefix(key, "ssl."):
		return true
	}
	return false
}

// secretNames are Kafka's client configs that hold credentials. Most are not
// mirror configs, but the CLI's client configs and records written by other
// kmirror versions carry them, and all are masked the same way.
var secretNames = map[string]bool{
	"sasl.password": true, "sasl.jaas.config": true, "ssl.key.password": true,
	"ssl.keystore.password": true, "ssl.truststore.password": true, "ssl.keystore.key": true,
}

// IsSecret reports whether a key's value is a secret: never shown (describe,
// dump-state, logs) and never stored in clear in __mirror_state. It is the one
// list of sensitive keys; besides the known ones it errs on the side of
// masking for keys it does not know (anything about passwords, secrets,
// tokens, JAAS or private keys).
func IsSecret(key string) bool {
	k := strings.ToLower(key)
	return specs[key].secret || secretNames[k] ||
		strings.HasSuffix(k, ".password") || strings.HasSuffix(k, ".secret") || strings.HasSuffix(k, ".key") ||
		strings.Contains(k, "password") || strings.Contains(k, "secret") || strings.Contains(k, "jaas") || strings.Contains(k, "token")
}

// Validate checks a mirror's configs and returns an error that names the
// first bad key and says what is expected.
func Validate(configs map[string]string) error {
	keys := make([]string, 0, len(configs))
	for k := range configs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s, ok := specs[k]
		if !ok {
			return fmt.Errorf("unknown mirror config %q; accepted configs are: %s", k, strings.Join(Keys(), ", "))
		}
		if err := s.check(configs[k]); err != nil {
			return fmt.Errorf("mirror config %s=%q: %w", k, shown(k, configs[k]), err)
		}
	}
	for _, k := range Keys() {
		if specs[k].required && strings.TrimSpace(configs[k]) == "" {
			return fmt.Errorf("mirror config %s is required (%s)", k, specs[k].doc)
		}
	}
	if p := configs["security.protocol"]; strings.HasPrefix(p, "SASL") && configs["sasl.username"] == "" {
		return fmt.Errorf("security.protocol=%s needs sasl.username and sasl.password", p)
	}
	return nil
}

func shown(k, v string) string {
	if IsSecret(k) {
		return "******"
	}
	return v
}

func (s spec) check(v string) error {
	switch s.kind {
	case kInt:
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("not a whole number")
		}
		if n < s.min && !(n == 0 && s.zeroDerived) {
			if s.zeroDerived {
				return fmt.Errorf("must be 0 (derived) or at least %d", s.min)
			}
			return fmt.Errorf("must be at least %d", s.min)
		}
	case kBool:
		if _, err := strconv.ParseBool(v); err != nil {
			return fmt.Errorf("must be true or false")
		}
	case kEnum:
		for _, e := range s.enum {
			if v == e {
				return nil
			}
		}
		return fmt.Errorf("must be one of %q", s.enum)
	case kACLRules:
		if _, err := aclfilter.Parse(v); err != nil {
			return err
		}
	case kClientID:
		return clientid.Check(v)
	case kRegexList:
		for _, p := range List(v) {
			if _, err := regexp.Compile("^(?:" + p + ")$"); err != nil {
				return fmt.Errorf("invalid regex %q: %w", p, err)
			}
		}
	}
	return nil
}

// List splits a comma-separated value, dropping blanks.
func List(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// AppendNew appends to have the entries of add it does not hold yet.
func AppendNew(have, add []string) []string {
	seen := map[string]bool{}
	for _, h := range have {
		seen[h] = true
	}
	for _, a := range add {
		if !seen[a] {
			have = append(have, a)
			seen[a] = true
		}
	}
	return have
}

// Config is a mirror's configs in typed form, defaults applied.
type Config struct {
	Bootstrap             []string
	SourceClusterID       string
	SourceClientID        string // "" = the default, clientid.Source
	SecurityProtocol      string
	SASLMechanism         string
	SASLUser, SASLPass    string
	CAFile                string
	CertFile, KeyFile     string
	VerifyHostname        bool
	TopicsInclude         *Matcher
	GroupsInclude         *Matcher
	ACLsInclude           aclfilter.Rules
	TopicPropertyExcluded map[string]bool
	FetchMaxBytes         int32
	FetchResponseMaxBytes int32
	FetchMaxWait          time.Duration
	FetchMaxInFlight      int
	RefreshInterval       time.Duration
	ThrottledRate         int64
	BufferMaxBytes        int64
	RetryInitialBackoff   time.Duration
	RetryMaxBackoff       time.Duration
	RetryMaxAttempts      int16
}

// Parse returns the typed configs; invalid values (which Validate refuses
// before they are stored) fall back to defaults.
func Parse(configs map[string]string) Config {
	get := func(k string) string { return Value(configs, k) }
	num := func(k string) int64 { return Number(configs, k) }
	ms := func(k string) time.Duration { return Millis(configs, k) }
	c := Config{
		Bootstrap:             List(get("bootstrap.servers")),
		SourceClusterID:       get("source.cluster.id"),
		SourceClientID:        get("source.client.id"),
		SecurityProtocol:      get("security.protocol"),
		SASLMechanism:         get("sasl.mechanism"),
		SASLUser:              get("sasl.username"),
		SASLPass:              get("sasl.password"),
		CAFile:                get("ssl.ca.location"),
		CertFile:              get("ssl.certificate.location"),
		KeyFile:               get("ssl.key.location"),
		VerifyHostname:        get("ssl.endpoint.identification.algorithm") == "https",
		TopicsInclude:         NewMatcher(List(get("topics.include")), List(get("topics.exclude"))),
		GroupsInclude:         NewMatcher(List(get("groups.include")), List(get("groups.exclude"))),
		TopicPropertyExcluded: map[string]bool{},
		FetchMaxBytes:         int32(min(num("fetch.max.bytes"), 1<<30)),
		FetchResponseMaxBytes: int32(min(num("fetch.response.max.bytes"), 1<<30)),
		FetchMaxWait:          ms("fetch.wait.max.ms"),
		FetchMaxInFlight:      int(min(num("fetch.max.in.flight"), 64)),
		RefreshInterval:       ms("metadata.refresh.interval.ms"),
		ThrottledRate:         num("replication.throttled.rate"),
		BufferMaxBytes:        num("copy.buffer.max.bytes"),
		RetryInitialBackoff:   ms("failed.retry.initial.backoff.ms"),
		RetryMaxBackoff:       ms("failed.retry.max.backoff.ms"),
		RetryMaxAttempts:      int16(min(num("failed.retry.max.attempts"), 32767)),
	}
	c.ACLsInclude, _ = aclfilter.Parse(get("acls.include"))
	for _, p := range List(get("topic.properties.exclude")) {
		c.TopicPropertyExcluded[p] = true
	}
	return c
}

// Value is one key's value as Parse reads it: the mirror's if valid, else the default.
// Value, Number and Millis are for the loops that look at one or two keys of every mirror
// or partition often (the refresh scheduler, a partition worker's every event, the data
// path's rate limit): Parse compiles every pattern list, and called per partition event it
// was 16 % of a 64-partition copy's CPU.
func Value(configs map[string]string, key string) string {
	if v, ok := configs[key]; ok && specs[key].check(v) == nil {
		return v
	}
	return specs[key].def
}

// Number is a numeric key's value as Parse reads it.
func Number(configs map[string]string, key string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(Value(configs, key)), 10, 64)
	return n
}

// Millis is a key in milliseconds as Parse reads it.
func Millis(configs map[string]string, key string) time.Duration {
	return time.Duration(Number(configs, key)) * time.Millisecond
}

// RefreshInterval is metadata.refresh.interval.ms alone, for the refresh
// loop's frequent looks (Parse compiles every pattern).
func RefreshInterval(configs map[string]string) time.Duration {
	return Millis(configs, "metadata.refresh.interval.ms")
}

// Matcher matches names against include and exclude regexes (whole-name
// matches; exclude wins).
type Matcher struct {
	include, exclude []*regexp.Regexp
}

// NewMatcher compiles the patterns; invalid ones are dropped (Validate
// refuses them before they are stored).
func NewMatcher(include, exclude []string) *Matcher {
	m := &Matcher{}
	for _, p := range include {
		if re, err := regexp.Compile("^(?:" + p + ")$"); err == nil {
			m.include = append(m.include, re)
		}
	}
	for _, p := range exclude {
		if re, err := regexp.Compile("^(?:" + p + ")$"); err == nil {
			m.exclude = append(m.exclude, re)
		}
	}
	return m
}

// Match reports whether name is included and not excluded.
func (m *Matcher) Match(name string) bool {
	for _, re := range m.exclude {
		if re.MatchString(name) {
			return false
		}
	}
	for _, re := range m.include {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// Excluded reports whether name matches an exclude pattern.
func (m *Matcher) Excluded(name string) bool {
	for _, re := range m.exclude {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}
