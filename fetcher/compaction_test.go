package fetcher

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/polltest"
)

// Compaction on the source leaves offsets with no record inside batches,
// and batches with none left. They are filled with invisible markers, so
// every surviving record keeps its offset and consumers see the same on
// both clusters.
func testCompactedSource(t *testing.T, e *env) {
	const topic = "compacted"
	e.createSource(topic, 1, compactedConfigs())
	write := e.keyWriter(topic, kgo.ZstdCompression())
	write("a", "b", "c", "d", "e", "f") // a, c and e are overwritten below
	write("g")
	write("tomb")
	polltest.Eventually(t, time.Minute, "the source compacted batches", func() (bool, string) {
		write("a", "c", "e", "tomb") // new segments roll (segment.ms), older ones get cleaned
		return e.holesIn(e.src, topic) >= 6, ""
	})
	e.stopCompaction(topic)
	e.ensureDestination(topic)
	c := e.newCopier(Config{})
	defer c.Close()
	pr, last := e.runCopy(c, topic, nil)
	n := e.verifyEntries(topic, 0, false)
	e.sameConsumers(topic, 0, last)
	e.sameLatestValues(topic, last)
	if pr.FillerMarkers == 0 {
		t.Fatalf("progress %+v: the compacted source should have needed marker filler", pr)
	}
	t.Logf("%d records at identical offsets; %d offsets without a record filled with markers", n, pr.FillerMarkers)
}

// The source keeps compacting while the copy runs (some batches are copied
// before their records are cleaned away, some after): offsets stay
// identical and the latest value of every key is the same on both clusters.
func testCompactionWhileMirroring(t *testing.T, e *env) {
	const topic = "compacting"
	e.createSource(topic, 1, compactedConfigs())
	write := e.keyWriter(topic, kgo.Lz4Compression())
	e.ensureDestination(topic)
	c := e.newCopier(Config{})
	defer c.Close()
	pr, last := e.runCopy(c, topic, func() {
		e.compactWhileCopying(c, topic, write)
	})
	n := e.verifyEntries(topic, 0, true)
	e.sameLatestValues(topic, last)
	if pr.FillerMarkers == 0 {
		t.Fatalf("progress %+v: the lagging copy should have met compacted batches", pr)
	}
	t.Logf("%d source records at identical offsets; %d offsets filled with markers", n, pr.FillerMarkers)
}

// compactWhileCopying writes keys so the source compacts: first while the
// copy lags (its fetches are held) and meets batches the cleaner has been
// through, then while it keeps up, and the cleaner goes through batches it
// has already copied.
func (e *env) compactWhileCopying(c *Copier, topic string, write func(keys ...string)) {
	t := e.t
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	c.hold(topic, 0, true, false)
	began := time.Now()
	for round := 0; ; round++ {
		write(keys[round%len(keys)], keys[(round*3+1)%len(keys)])
		if round%10 != 9 {
			continue
		}
		if h := e.holesIn(e.src, topic); round >= 40 && h >= 10 {
			t.Logf("%d rounds of writes; the source compacted %d offsets away before the copy read them", round+1, h)
			break
		}
		if time.Since(began) > time.Minute {
			t.Fatalf("the source compacted only %d offsets in a minute", e.holesIn(e.src, topic))
		}
	}
	c.hold(topic, 0, false, false)
	for round := 0; round < 60; round++ {
		write(keys[round%len(keys)], keys[(round*5+3)%len(keys)])
	}
}

func compactedConfigs() map[string]*string {
	return map[string]*string{
		"cleanup.policy":            kadm.StringPtr("compact"),
		"segment.ms":                kadm.StringPtr("100"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.01"),
		"min.compaction.lag.ms":     kadm.StringPtr("0"),
		"delete.retention.ms":       kadm.StringPtr("86400000"),
	}
}

// keyWriter returns a function that writes one batch of keyed records
// (key "tomb" is written as a tombstone).
func (e *env) keyWriter(topic string, codec kgo.CompressionCodec) func(keys ...string) {
	cl := e.client(e.p.src, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(0))
	n := 0
	return func(keys ...string) {
		e.t.Helper()
		var recs []*kgo.Record
		for _, k := range keys {
			n++
			r := &kgo.Record{Topic: topic, Key: []byte(k), Value: fmt.Appendf(nil, "%s-v%d", k, n)}
			if k == "tomb" {
				r.Value = nil
			}
			recs = append(recs, r)
		}
		if err := cl.ProduceSync(e.ctx, recs...).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// holesIn counts source offsets below the high watermark with no record.
func (e *env) holesIn(cl *kgo.Client, topic string) int {
	holes := 0
	next := int64(-1)
	for _, b := range e.rawBatches(cl, topic, 0, 0) {
		if next >= 0 && b.BaseOffset > next {
			holes += int(b.BaseOffset - next)
		}
		holes += int(int64(b.LastOffsetDelta) + 1 - int64(b.NumRecords))
		next = b.NextOffset()
	}
	return holes
}

// stopCompaction makes every record of a compacted source topic too young to
// clean, and waits until a cleaning pass in progress is over (the holes stop
// changing), so that a copy can be compared offset for offset.
func (e *env) stopCompaction(topic string) {
	e.t.Helper()
	lag := "86400000"
	resps, err := e.srcAdm.AlterTopicConfigs(e.ctx, []kadm.AlterConfig{{Name: "min.compaction.lag.ms", Value: &lag}}, topic)
	if err == nil {
		err = resps[0].Err
	}
	if err != nil {
		e.t.Fatal(err)
	}
	prev, since := -1, time.Now()
	polltest.Eventually(e.t, time.Minute, "source compaction settled", func() (bool, string) {
		h := e.holesIn(e.src, topic)
		if h != prev {
			prev, since = h, time.Now()
		}
		return time.Since(since) > time.Second, ""
	})
}

// sameLatestValues checks the latest value of every key, read by consumers
// of both clusters up to offset last.
func (e *env) sameLatestValues(topic string, last int64) {
	e.t.Helper()
	latest := func(recs []string) map[string]string {
		m := map[string]string{}
		for _, r := range recs {
			_, kv, _ := strings.Cut(r, ":")
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		return m
	}
	s := latest(e.consumeAll(e.p.src, topic, 0, false, last))
	d := latest(e.consumeAll(e.p.dst, topic, 0, false, last))
	if fmt.Sprint(s) != fmt.Sprint(d) {
		e.t.Fatalf("%s: latest values differ:\nsource      %v\ndestination %v", topic, s, d)
	}
	e.t.Logf("%s: latest values of %d keys alike on both clusters", topic, len(s))
}
