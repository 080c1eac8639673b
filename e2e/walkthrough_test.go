package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// The migration walk-through of docs/versions.md, run as written: its ```sh blocks are read
// from the doc, so that an edit that breaks a command breaks this test.
const (
	walkDoc     = "../docs/versions.md"
	walkSection = "## Migration: a ZooKeeper 3.x cluster to a Kafka 4.x KRaft cluster"
)

// walkSteps are the doc's blocks in order: start kmirror, create, add (+ describe), fail
// over, delete.
const walkSteps = 5

// walkBlocks reads the section's ```sh blocks, each without the indentation of its fence
// (a heredoc's terminator must start its line).
func walkBlocks(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(walkDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), walkSection+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", walkDoc, walkSection)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks []string
	var cur []string
	indent, in := "", false
	for _, line := range strings.Split(section, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case !in && trimmed == "```sh":
			indent, in, cur = line[:strings.Index(line, "```")], true, nil
		case in && trimmed == "```":
			blocks, in = append(blocks, strings.Join(cur, "\n")+"\n"), false
		case in:
			cur = append(cur, strings.TrimPrefix(line, indent))
		}
	}
	if len(blocks) != walkSteps {
		t.Fatalf("%s %q has %d sh blocks, the test runs %d (start, create, add, fail over, delete): update both", walkDoc, walkSection, len(blocks), walkSteps)
	}
	return blocks
}

// walkthrough runs the doc's commands against the matrix pair's clusters and kmirror.
type walkthrough struct {
	p      *matrixPair
	dir    string // where the commands run (old.properties lands here)
	km     string // the matrix's kmirror
	listen string // step 1's kmirror
	mirror string
	group  string
	topics []string
	subst  []string // doc text, real text pairs
}

// checkWalkthrough is the migration walk-through: a consumer group that committed on the
// old cluster resumes through kmirror at the next record, and the first record produced
// after the failover lands right after the last mirrored offset.
func (p *matrixPair) checkWalkthrough(t *testing.T) {
	w := p.newWalkthrough(t)
	blocks := walkBlocks(t)
	w.placeholders(t, blocks)
	w.seed(t)
	w.startProxy(t, w.commands(t, blocks[0]))
	w.run(t, blocks[1])
	w.run(t, blocks[2])
	oldSide := w.consumeOnOld(t)
	w.waitGroupSynced(t, blocks[2], len(oldSide))
	w.offsetsCopied(t)
	w.resumeThroughKM(t, oldSide)
	ends := endsOf(t, p.src, w.topics[0])
	w.run(t, blocks[3])
	w.produceAfterFailover(t, ends)
	w.run(t, blocks[4])
}

func (p *matrixPair) newWalkthrough(t *testing.T) *walkthrough {
	bin := p.binary(t)
	// The doc's commands call `kmirror`: put the binary on PATH under that name.
	binDir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(binDir, "kmirror")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	w := &walkthrough{p: p, dir: t.TempDir(), km: p.admin.OptValue(kgo.SeedBrokers).([]string)[0], listen: freeAddr(t),
		mirror: p.prefix + "old", group: p.prefix + "walk-app", topics: []string{p.topic("orders"), p.topic("payments")}}
	// The pair's prefix keeps the topics and the mirror apart from the other pairs' on the
	// shared source and destination.
	w.subst = []string{
		"OLD:9092", p.src.BootstrapString(), "NEW:9092", p.dst.BootstrapString(), "KM:9092", w.km,
		"0.0.0.0:9092", w.listen, "KM_HOST", "127.0.0.1",
		"--mirror old", "--mirror " + w.mirror, "orders", w.topics[0], "payments", w.topics[1], "app-", p.prefix + "app-",
	}
	return w
}

// placeholders checks that the blocks use every placeholder the test replaces, so that a doc
// that renames one fails here rather than running against something else.
func (w *walkthrough) placeholders(t *testing.T, blocks []string) {
	t.Helper()
	all := strings.Join(blocks, "")
	for i := 0; i < len(w.subst); i += 2 {
		if !strings.Contains(all, w.subst[i]) {
			t.Fatalf("the walk-through's commands in %s no longer have %q, which the test replaces: update both", walkDoc, w.subst[i])
		}
	}
}

// commands is a block with the doc's placeholders replaced (at least one must be in it).
func (w *walkthrough) commands(t *testing.T, block string) string {
	t.Helper()
	var pairs []string
	for i := 0; i < len(w.subst); i += 2 {
		if strings.Contains(block, w.subst[i]) {
			pairs = append(pairs, w.subst[i], w.subst[i+1])
		}
	}
	if len(pairs) == 0 {
		t.Fatalf("no placeholder (OLD:9092, KM:9092, ...) in the doc's block:\n%s", block)
	}
	return strings.NewReplacer(pairs...).Replace(block)
}

// run runs a block with sh -e in the walk's directory and logs it with its output.
func (w *walkthrough) run(t *testing.T, block string) {
	t.Helper()
	script, out := w.sh(t, block)
	t.Logf("$ %s%s", script, out)
}

// sh runs a block with sh -e in the walk's directory: the script run and its output.
func (w *walkthrough) sh(t *testing.T, block string) (script, out string) {
	t.Helper()
	script = w.commands(t, block)
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir = w.dir
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the doc's commands failed: %v\n%s\noutput:\n%s", err, script, b)
	}
	return script, string(b)
}

// startProxy runs step 1's `kmirror proxy` line, with --mirroring=false added, until it
// serves Kafka from the new cluster; then stops it. Its flags must parse and its listener
// must answer. The added flag keeps it out of the instances' group: joining it rebalanced
// the matrix's instance and took 15s under load. The steps after it go to the matrix's
// instance, which stands for the deployment step 1 starts.
func (w *walkthrough) startProxy(t *testing.T, line string) {
	t.Helper()
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "kmirror proxy ") || strings.Contains(line, "\n") {
		t.Fatalf("step 1 is not one `kmirror proxy` line: %q", line)
	}
	p := &process{t: t, bin: "sh", name: "walk-proxy", addr: w.listen, args: []string{"-c", "exec " + line + " --mirroring=false"}}
	p.start()
	t.Cleanup(p.kill)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := kadm.NewClient(kafkatest.NewClient(t, []string{w.listen})).ListTopics(ctx); err != nil {
		t.Fatalf("metadata through step 1's kmirror: %v", err)
	}
	p.stop()
}

const walkRecords = 40 // per partition

// seed writes the topics on the old cluster, as its producers did before the migration.
func (w *walkthrough) seed(t *testing.T) {
	for _, topic := range w.topics {
		w.p.src.CreateKeptTopic(t, topic, matrixPartitions)
		produce(t, w.p.src, topic, matrixPartitions, walkRecords, kgo.NoCompression())
	}
}

// walkRecord is how a record is compared: partition, offset, key, value.
func walkRecord(r *kgo.Record) string {
	return fmt.Sprintf("%s/%d %d:%s=%s", r.Topic, r.Partition, r.Offset, r.Key, r.Value)
}

// consumeOnOld runs the group on the old cluster until it consumed part of the topics,
// commits what it consumed, and stops it. It returns the records consumed per partition.
func (w *walkthrough) consumeOnOld(t *testing.T) map[string][]string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.p.src.Bootstrap()...), kgo.ConsumerGroup(w.group), kgo.ConsumeTopics(w.topics...),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close() // stopped: it leaves the group
	var got []*kgo.Record
	parts := map[string][]string{}
	total := len(w.topics) * matrixPartitions * walkRecords
	for len(got) < total/2 || len(parts) < len(w.topics)*matrixPartitions {
		fs := cl.PollRecords(ctx, 7)
		if ctx.Err() != nil {
			t.Fatalf("the group consumed %d records on the old cluster, want half of %d from every partition", len(got), total)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("consume %s/%d on the old cluster: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			got = append(got, r)
			k := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
			parts[k] = append(parts[k], walkRecord(r))
		})
	}
	if err := cl.CommitRecords(ctx, got...); err != nil {
		t.Fatalf("commit on the old cluster: %v", err)
	}
	return parts
}

// waitGroupSynced runs the doc's describe line until it shows the group SYNCED with the
// partitions it committed.
func (w *walkthrough) waitGroupSynced(t *testing.T, block string, partitions int) {
	t.Helper()
	var describe string
	for _, line := range strings.Split(block, "\n") {
		if strings.Contains(line, "--describe") {
			describe = line + "\n"
		}
	}
	if describe == "" {
		t.Fatalf("step 3 has no --describe line:\n%s", block)
	}
	row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(w.mirror) + `\s+` + regexp.QuoteMeta(w.group) + `\s+SYNCED\s+(?:never|\S+ ago)\s+` + fmt.Sprint(partitions) + `\b`)
	var script, out string
	polltest.Eventually(t, time.Minute, "describe shows group "+w.group+" SYNCED", func() (bool, string) {
		script, out = w.sh(t, describe)
		return row.MatchString(out), out
	})
	t.Logf("$ %s%s", script, out)
}

// offsetsCopied checks what SYNCED promises the operator who moves the group now: its
// offsets on the new cluster are its commits on the old one. (SYNCED used to include offsets
// lowered to what the copy had reached: the group then re-read records through kmirror.)
func (w *walkthrough) offsetsCopied(t *testing.T) {
	t.Helper()
	for _, topic := range w.topics {
		src, dst := committedOffsets(t, w.p.src, w.group, topic), committedOffsets(t, w.p.dst, w.group, topic)
		t.Logf("group %s's offsets of %s: old cluster %v, new cluster %v", w.group, topic, src, dst)
		if fmt.Sprint(src) != fmt.Sprint(dst) {
			t.Fatalf("describe shows group %s SYNCED, but its offsets of %s are %v on the new cluster, %v on the old", w.group, topic, dst, src)
		}
	}
}

// resumeThroughKM starts the group against kmirror: it must read every record the old
// cluster's group did not, from the next offset on, none twice, none skipped.
func (w *walkthrough) resumeThroughKM(t *testing.T, oldSide map[string][]string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := kafkatest.NewClient(t, []string{w.km}, kgo.ConsumerGroup(w.group), kgo.ConsumeTopics(w.topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	want := map[string][]string{}
	for _, topic := range w.topics {
		for p := range int32(matrixPartitions) {
			want[fmt.Sprintf("%s/%d", topic, p)] = prefixed(topic, p, readUpTo(t, w.p.src.Bootstrap(), topic, p, false, walkRecords-1))
		}
	}
	got := map[string][]string{}
	for k, recs := range oldSide {
		got[k] = append([]string(nil), recs...)
	}
	// Until every partition's last record is read: a count of records would stop early when
	// some were read twice, and report the ones not yet read as skipped.
	polltest.Eventually(t, time.Minute, "the group resumed through kmirror", func() (bool, string) {
		cl.PollRecords(ctx, 100).EachRecord(func(r *kgo.Record) {
			k := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
			got[k] = append(got[k], walkRecord(r))
		})
		var short []string
		for k := range want {
			if n := len(got[k]); n == 0 || !strings.HasPrefix(got[k][n-1], fmt.Sprintf("%s %d:", k, walkRecords-1)) {
				short = append(short, fmt.Sprintf("%s (%d records)", k, n))
			}
		}
		return len(short) == 0, fmt.Sprintf("last records not read yet on %v", short)
	})
	for k, recs := range want {
		if strings.Join(got[k], "\n") != strings.Join(recs, "\n") {
			t.Fatalf("%s: the old cluster's group then kmirror's read\n%s\nwant the source's records once each\n%s",
				k, strings.Join(got[k], "\n"), strings.Join(recs, "\n"))
		}
	}
}

// prefixed turns readUpTo's "offset:key=value" into walkRecord's form.
func prefixed(topic string, p int32, recs []string) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s/%d %s", topic, p, r)
	}
	return out
}

// produceAfterFailover produces through kmirror once the topics are failed over: the records
// land at the old cluster's end offsets.
func (w *walkthrough) produceAfterFailover(t *testing.T, ends map[int32]int64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := kafkatest.NewClient(t, []string{w.km}, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	rec := &kgo.Record{Topic: w.topics[0], Partition: 1, Value: []byte("first order on the new cluster")}
	produceWhenWritable(t, ctx, cl, rec)
	if rec.Offset != ends[1] {
		t.Fatalf("the first record after the failover is at %s/1 offset %d, want %d (the last mirrored offset)", w.topics[0], rec.Offset, ends[1])
	}
}
