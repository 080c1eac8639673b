package mirrorcli

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/secrets"
	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// DumpStateArgs is a parsed `kmirror dump-state` command line.
type DumpStateArgs struct {
	Bootstrap     string
	CommandConfig string
	Topic         string
	Segment       string
	Partition     int32 // of a segment; -1 = from its directory name
	JSON          bool
	Timeout       time.Duration
}

// DumpStateHelp is `kmirror dump-state -h`.
const DumpStateHelp = `Usage: kmirror dump-state (--bootstrap-server HOST:PORT [--command-config FILE] | --segment FILE.log) [flags]

Decode the records of the __mirror_state topic, one line per record:
  partition=P offset=O timestamp=T TYPE KEY-FIELDS value=JSON | TOMBSTONE
Secrets in mirror configs are masked. A record that cannot be decoded is
printed as UNDECODABLE with the reason; the dump goes on (exit status 1 at the end).

Source (exactly one):
  --bootstrap-server HOST:PORT  the destination cluster or a kmirror proxy in front of it;
                                reads every partition from its start to its current end
  --command-config FILE         client security properties (as for kmirror mirrors)
  --topic NAME                  state topic name (default __mirror_state)
  --timeout DURATION            give up reading the topic after this long (default 60s)
  --segment FILE.log            a log segment file of a __mirror_state partition, e.g.
                                <log.dir>/__mirror_state-3/00000000000000000000.log
  --partition N                 the segment's partition (default: from its directory name)

Output:
  --json                        one JSON object per line instead of text
`

// ParseDumpStateArgs parses and validates a `kmirror dump-state` command line.
func ParseDumpStateArgs(args []string, help io.Writer) (*DumpStateArgs, error) {
	a := &DumpStateArgs{}
	fs := flag.NewFlagSet("kmirror dump-state", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var partition int
	fs.StringVar(&a.Bootstrap, "bootstrap-server", "", "")
	fs.StringVar(&a.CommandConfig, "command-config", "", "")
	fs.StringVar(&a.Topic, "topic", statetopic.TopicName, "")
	fs.StringVar(&a.Segment, "segment", "", "")
	fs.IntVar(&partition, "partition", -1, "")
	fs.BoolVar(&a.JSON, "json", false, "")
	fs.DurationVar(&a.Timeout, "timeout", 60*time.Second, "")
	if err := parseFlags(fs, args, help, DumpStateHelp, "give a segment file with --segment FILE"); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case a.Bootstrap == "" && a.Segment == "":
		return nil, usagef("nothing to read: give --bootstrap-server HOST:PORT (the destination cluster or the kmirror proxy) or --segment FILE.log")
	case a.Bootstrap != "" && a.Segment != "":
		return nil, usagef("--bootstrap-server and --segment given together; read either the topic or one segment file")
	}
	if a.Segment != "" {
		for _, f := range []string{"command-config", "topic", "timeout"} {
			if set[f] {
				return nil, usagef("--%s applies to reading the topic with --bootstrap-server, not to --segment; remove it", f)
			}
		}
	} else if set["partition"] {
		return nil, usagef("--partition applies to --segment; the topic is read whole")
	}
	if partition < -1 || partition > 1<<31-1 {
		return nil, usagef("--partition %d is not a partition number", partition)
	}
	a.Partition = int32(partition)
	if a.Timeout <= 0 {
		return nil, usagef("--timeout %s must be positive, e.g. --timeout 2m", a.Timeout)
	}
	return a, nil
}

// DumpState runs `kmirror dump-state`.
func DumpState(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a, err := ParseDumpStateArgs(args, stdout)
	if err != nil {
		return err
	}
	d := &dumper{w: stdout, json: a.JSON}
	if a.Segment != "" {
		err = d.segment(a)
	} else {
		err = d.topic(ctx, a)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%s (%d tombstones, %d control, %d undecodable)\n", plural(d.records, "record"), d.tombstones, d.control, d.bad)
	if d.bad > 0 {
		return fmt.Errorf("%s could not be decoded; they are printed as UNDECODABLE with the reason", plural(d.bad, "record"))
	}
	return nil
}

var partitionDirRE = regexp.MustCompile(`-(\d+)$`)

func (d *dumper) segment(a *DumpStateArgs) error {
	data, err := os.ReadFile(a.Segment)
	if err != nil {
		return usagef("--segment: %v", err)
	}
	p := a.Partition
	if p < 0 {
		p = -1
		if m := partitionDirRE.FindStringSubmatch(filepath.Base(filepath.Dir(a.Segment))); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 32)
			p = int32(n)
		}
	}
	ReadSegment(data, func(r LogRecord) { d.record(p, r) })
	return nil
}

func (d *dumper) topic(ctx context.Context, a *DumpStateArgs) error {
	sec, err := loadCommandConfig(a.CommandConfig)
	if err != nil {
		return &UsageError{err.Error()}
	}
	seeds := strings.Split(a.Bootstrap, ",")
	ctx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()
	consume, want, err := stateOffsets(ctx, a, append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ClientID("kmirror-dump-state")}, sec...))
	if err != nil || len(consume) == 0 {
		return err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(seeds...), kgo.ClientID("kmirror-dump-state"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{a.Topic: consume}),
		kgo.KeepControlRecords(), // so a transaction marker at the end still counts as read
		kgo.FetchMaxWait(500 * time.Millisecond),
	}, sec...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	return d.readTo(ctx, cl, a.Timeout, consume, want)
}

// stateOffsets lists what the dump reads: each partition of the topic from
// its start (consume) to its end when the dump starts (want, the offset
// after the last record).
func stateOffsets(ctx context.Context, a *DumpStateArgs, opts []kgo.Opt) (consume map[int32]kgo.Offset, want map[int32]int64, err error) {
	admCl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, usagef("--bootstrap-server %s: %v", a.Bootstrap, err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	starts, err := adm.ListStartOffsets(ctx, a.Topic)
	if err != nil {
		return nil, nil, fmt.Errorf("listing %s offsets at %s: %w; check --bootstrap-server and --command-config", a.Topic, a.Bootstrap, err)
	}
	ends, err := adm.ListEndOffsets(ctx, a.Topic)
	if err != nil {
		return nil, nil, fmt.Errorf("listing %s offsets at %s: %w", a.Topic, a.Bootstrap, err)
	}
	if len(ends[a.Topic]) == 0 {
		if e := ends.Error(); e != nil {
			return nil, nil, fmt.Errorf("topic %s at %s: %w (no mirror was ever created on this cluster, or --topic is wrong)", a.Topic, a.Bootstrap, e)
		}
		return nil, nil, fmt.Errorf("topic %s does not exist at %s: no mirror was ever created on this cluster, or --topic is wrong", a.Topic, a.Bootstrap)
	}
	consume, want = map[int32]kgo.Offset{}, map[int32]int64{}
	var firstErr error
	ends.Each(func(o kadm.ListedOffset) {
		s, ok := starts.Lookup(a.Topic, o.Partition)
		switch {
		case o.Err != nil:
			firstErr = cmpErr(firstErr, fmt.Errorf("partition %d: %w", o.Partition, o.Err))
		case !ok || s.Err != nil:
			firstErr = cmpErr(firstErr, fmt.Errorf("partition %d: no start offset", o.Partition))
		case s.Offset < o.Offset:
			consume[o.Partition] = kgo.NewOffset().At(s.Offset)
			want[o.Partition] = o.Offset
		}
	})
	if firstErr != nil {
		return nil, nil, fmt.Errorf("reading %s offsets: %w", a.Topic, firstErr)
	}
	return consume, want, nil
}

// readTo reads every partition from consume up to want. Records arrive per
// partition in order; each partition is printed whole, in partition order,
// once it is read to its end.
func (d *dumper) readTo(ctx context.Context, cl *kgo.Client, timeout time.Duration, consume map[int32]kgo.Offset, want map[int32]int64) error {
	pending := map[int32][]LogRecord{}
	next := map[int32]int64{}
	for p, o := range consume {
		next[p] = o.EpochOffset().Offset
	}
	for {
		behind := behind(next, want)
		if len(behind) == 0 {
			break
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			d.flush(pending)
			return fmt.Errorf("stopped after --timeout %s before reading everything (%s); raise --timeout", timeout, strings.Join(behind, ", "))
		}
		fs.EachError(func(_ string, p int32, err error) {
			d.record(p, LogRecord{Offset: next[p], Err: fmt.Errorf("fetch: %w", err)})
		})
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= want[r.Partition] {
				return // written after the dump started
			}
			pending[r.Partition] = append(pending[r.Partition], LogRecord{
				Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value, Control: r.Attrs.IsControl(),
			})
			next[r.Partition] = r.Offset + 1
		})
	}
	d.flush(pending)
	return nil
}

// behind says which partitions are not read to want yet, sorted.
func behind(next, want map[int32]int64) []string {
	var out []string
	for p, end := range want {
		if next[p] < end {
			out = append(out, fmt.Sprintf("partition %d at %d of %d", p, next[p], end))
		}
	}
	sort.Strings(out)
	return out
}

func cmpErr(have, e error) error {
	if have != nil {
		return have
	}
	return e
}

// dumper formats records.
type dumper struct {
	w                                 io.Writer
	json                              bool
	records, tombstones, control, bad int
}

func (d *dumper) flush(pending map[int32][]LogRecord) {
	parts := make([]int32, 0, len(pending))
	for p := range pending {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	for _, p := range parts {
		for _, r := range pending[p] {
			d.record(p, r)
		}
	}
}

// DumpedRecord is one --json line of dump-state.
type DumpedRecord struct {
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	Timestamp *time.Time      `json:"timestamp,omitempty"`
	Type      string          `json:"type"` // a record type, CONTROL or UNDECODABLE
	Key       *DumpedKey      `json:"key,omitempty"`
	Value     json.RawMessage `json:"value,omitempty"`
	Tombstone bool            `json:"tombstone,omitempty"`
	Error     string          `json:"error,omitempty"`
	RawKey    string          `json:"raw_key,omitempty"` // hex, when the key does not decode
}

// DumpedKey is a decoded state key.
type DumpedKey struct {
	Mirror        string `json:"mirror,omitempty"`   // every record but a route's
	Route         string `json:"route,omitempty"`    // RouteSwitch, RouteAck
	Instance      string `json:"instance,omitempty"` // RouteAck
	Step          string `json:"step,omitempty"`     // RouteAck
	Topic         string `json:"topic,omitempty"`
	Group         string `json:"group,omitempty"`
	SourceTopicID string `json:"source_topic_id,omitempty"`
	Partition     *int32 `json:"partition,omitempty"`
}

// DecodeStateRecord decodes one __mirror_state record into its dump form.
func DecodeStateRecord(partition int32, r LogRecord) DumpedRecord {
	out := DumpedRecord{Partition: partition, Offset: r.Offset}
	if !r.Timestamp.IsZero() {
		ts := r.Timestamp.UTC()
		out.Timestamp = &ts
	}
	if r.Err != nil {
		out.Type, out.Error = "UNDECODABLE", r.Err.Error()
		return out
	}
	if r.Control {
		out.Type = "CONTROL"
		return out
	}
	k, err := statetopic.DecodeKey(r.Key)
	if err != nil {
		out.Type, out.Error, out.RawKey = "UNDECODABLE", "key: "+err.Error(), hex.EncodeToString(r.Key)
		if r.Value == nil {
			out.Tombstone = true
		}
		return out
	}
	out.Type = k.Type.String()
	dk := &DumpedKey{Mirror: k.Mirror}
	switch k.Type {
	case statetopic.TypeMirrorTopic:
		dk.Topic = k.Topic
	case statetopic.TypeGroupSync:
		dk.Group = k.Group
	case statetopic.TypePartitionState:
		dk.SourceTopicID = k.SourceTopicID.String()
		p := k.Partition
		dk.Partition = &p
	case statetopic.TypeRouteSwitch, statetopic.TypeRouteRequest:
		dk.Route = k.Route
	case statetopic.TypeRouteAck:
		dk.Route, dk.Instance, dk.Step = k.Route, k.Instance, k.Step.String()
	}
	out.Key = dk
	if r.Value == nil {
		out.Tombstone = true
		return out
	}
	v, err := statetopic.DecodeValue(k.Type, r.Value)
	if err != nil {
		// The raw value is not shown: it may hold a secret.
		out.Type, out.Error = "UNDECODABLE", fmt.Sprintf("%s value (%d bytes): %v", k.Type, len(r.Value), err)
		return out
	}
	if mc, ok := v.(*statetopic.MirrorConfig); ok {
		masked := make(map[string]string, len(mc.Configs))
		for key, val := range mc.Configs {
			if mirrorconfig.IsSecret(key) {
				val = secrets.Mask(val)
			}
			masked[key] = val
		}
		c := *mc
		c.Configs = masked
		v = &c
	}
	j, err := json.Marshal(v)
	if err != nil {
		out.Type, out.Error = "UNDECODABLE", fmt.Sprintf("%s value: re-encoding: %v", k.Type, err)
		return out
	}
	out.Value = j
	return out
}

// FormatText is the text line of a dumped record.
func (r DumpedRecord) FormatText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "partition=%d offset=%d", r.Partition, r.Offset)
	if r.Timestamp != nil {
		fmt.Fprintf(&b, " timestamp=%s", r.Timestamp.Format(time.RFC3339Nano))
	}
	b.WriteString(" " + r.Type)
	if r.Key != nil {
		fmt.Fprintf(&b, " mirror=%q", r.Key.Mirror)
		if r.Key.Topic != "" {
			fmt.Fprintf(&b, " topic=%q", r.Key.Topic)
		}
		if r.Key.Group != "" {
			fmt.Fprintf(&b, " group=%q", r.Key.Group)
		}
		if r.Key.SourceTopicID != "" {
			fmt.Fprintf(&b, " source-topic-id=%s", r.Key.SourceTopicID)
		}
		if r.Key.Partition != nil {
			fmt.Fprintf(&b, " mirror-partition=%d", *r.Key.Partition)
		}
	}
	if r.RawKey != "" {
		fmt.Fprintf(&b, " raw-key=%s", r.RawKey)
	}
	switch {
	case r.Error != "":
		fmt.Fprintf(&b, " error=%q", r.Error)
	case r.Tombstone:
		b.WriteString(" TOMBSTONE")
	case r.Value != nil:
		b.WriteString(" value=")
		b.Write(r.Value)
	}
	return b.String()
}

func (d *dumper) record(partition int32, r LogRecord) {
	dr := DecodeStateRecord(partition, r)
	switch {
	case dr.Type == "UNDECODABLE":
		d.bad++
	case dr.Type == "CONTROL":
		d.control++
	case dr.Tombstone:
		d.tombstones++
	}
	d.records++
	if d.json {
		j, _ := json.Marshal(dr)
		fmt.Fprintf(d.w, "%s\n", j)
		return
	}
	fmt.Fprintln(d.w, dr.FormatText())
}
