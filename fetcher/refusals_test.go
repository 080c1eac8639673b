package fetcher

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/internal/polltest"
)

// (d) A zombie: copier A holds a fetched batch; copier B takes over (epoch
// bump) and appends; A's late append is fenced; nothing is duplicated.
// (e) Someone writes to the destination partition directly: the copier's next
// append lands at the wrong offset and the partition fails, non-retriable.
func testDirectWrite(t *testing.T, e *env) {
	e.createSource("direct", 1, nil)
	e.produce("direct", 0, 50, 10, kgo.NoCompression(), "d1")
	e.ensureDestination("direct")
	c, evs := e.startCopy("direct")
	e.waitCopied(c, "direct", 0)
	w := e.client(e.p.dst)
	if err := w.ProduceSync(e.ctx, &kgo.Record{Topic: "direct", Value: []byte("intruder")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.produce("direct", 0, 10, 10, kgo.NoCompression(), "d2")
	evs.waitRefused(t, "offset mismatch reported", ErrOffsetMismatch)
	_, endAfter := e.offsets(e.dstAdm, "direct", 0)
	e.produce("direct", 0, 10, 10, kgo.NoCompression(), "d3")
	if _, err := c.Stop("direct", 0); !isErr(err, ErrOffsetMismatch) {
		t.Fatalf("Stop: %v", err)
	}
	if _, end := e.offsets(e.dstAdm, "direct", 0); end != endAfter {
		t.Fatalf("destination grew from %d to %d after the mismatch", endAfter, end)
	}
}

// A destination ahead of the source has diverged: never truncated, refused.
func testDiverged(t *testing.T, e *env) {
	e.createSource("diverged", 1, nil)
	e.produce("diverged", 0, 10, 10, kgo.NoCompression(), "s")
	e.ensureDestination("diverged")
	w := e.client(e.p.dst)
	for i := 0; i < 15; i++ {
		if err := w.ProduceSync(e.ctx, &kgo.Record{Topic: "diverged", Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	c := e.newCopier(Config{})
	defer c.Close()
	err := c.Start(e.ctx, Task{Topic: "diverged", Partition: 0, TransactionalID: "mirror-diverged-0"}, nil)
	if !isErr(err, ErrDiverged) {
		t.Fatalf("Start: %v, want ErrDiverged", err)
	}
	t.Logf("refused: %v", err)
	if _, err := Align(e.ctx, e.src, e.dst, "diverged", 0, datapath.Producer{ID: -1}); !isErr(err, ErrDiverged) {
		t.Fatalf("Align: %v, want ErrDiverged", err)
	}
}

// The source topic is deleted under a running copy: non-retriable.
func testSourceTopicDeleted(t *testing.T, e *env) {
	e.createSource("deleted", 1, nil)
	e.produce("deleted", 0, 10, 10, kgo.NoCompression(), "x")
	e.ensureDestination("deleted")
	c, evs := e.startCopy("deleted")
	e.waitCopied(c, "deleted", 0)
	if _, err := e.srcAdm.DeleteTopic(e.ctx, "deleted"); err != nil {
		t.Fatal(err)
	}
	evs.waitRefused(t, "source topic deletion reported", ErrSourceTopicChanged)
	if _, err := c.Stop("deleted", 0); !isErr(err, ErrSourceTopicChanged) {
		t.Fatalf("Stop: %v", err)
	}
}

// A mirror that recorded the source topic id refuses a re-created topic.
func testSourceTopicRecreated(t *testing.T, e *env) {
	e.createSource("recreated", 1, nil)
	e.ensureDestination("recreated")
	td, err := e.srcAdm.ListTopics(kadm.WithAuthorizedOps(e.ctx), "recreated")
	if err != nil {
		t.Fatal(err)
	}
	oldID := td["recreated"].ID
	if _, err := e.srcAdm.DeleteTopic(e.ctx, "recreated"); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, 30*time.Second, "source topic re-created", func() (bool, string) {
		resp, err := e.srcAdm.CreateTopic(e.ctx, 1, 1, nil, "recreated")
		return err == nil && resp.Err == nil, ""
	})
	if err := waitPartitionsLed(kadm.WithAuthorizedOps(e.ctx), e.srcAdm, "recreated", 1); err != nil {
		t.Fatal(err)
	}
	c := e.newCopier(Config{})
	defer c.Close()
	var startErr error
	polltest.Eventually(t, 30*time.Second, "Start refuses the re-created topic", func() (bool, string) {
		startErr = c.Start(e.ctx, Task{Topic: "recreated", Partition: 0, SourceTopicID: oldID, TransactionalID: "mirror-recreated-0"}, nil)
		return isErr(startErr, ErrSourceTopicChanged), ""
	})
	t.Logf("refused: %v", startErr)
}

// A source batch over the destination's max.message.bytes: a clear,
// non-retriable error (here the destination topic existed with the default
// limit while the source allows 3 MB batches).
func testBatchTooLarge(t *testing.T, e *env) {
	e.createSource("large", 1, map[string]*string{"max.message.bytes": kadm.StringPtr("3000000")})
	if resp, err := e.dstAdm.CreateTopic(e.ctx, 1, 1, nil, "large"); err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	e.ensureDestination("large")
	e.produce("large", 0, 5, 5, kgo.NoCompression(), "small")
	w := e.client(e.p.src, kgo.ProducerBatchMaxBytes(2500000), kgo.MaxBufferedBytes(10<<20),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	big := make([]byte, 2_000_000)
	for i, r := 0, rand.New(rand.NewPCG(1, 2)); i < len(big); i += 8 {
		binary.LittleEndian.PutUint64(big[i:], r.Uint64())
	}
	if err := w.ProduceSync(e.ctx, &kgo.Record{Topic: "large", Value: big}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c, evs := e.startCopy("large")
	evs.waitRefused(t, "batch too large reported", ErrBatchTooLarge)
	pr, _ := c.Stop("large", 0)
	if pr.DestinationLogEnd != 5 {
		t.Fatalf("destination log end %d, want 5 (the batches before the large one)", pr.DestinationLogEnd)
	}
}

// testDamagedSourceBatch damages one stored batch in the source's segment file
// (one bit of its last record, as a failing disk would), which the source
// broker serves as stored. The copy must not pass the damage on under a fresh
// CRC: the destination refuses the batch and the partition fails at it, with
// exactly the batches before it copied.
func testDamagedSourceBatch(t *testing.T, e *env) {
	e.createSource("damaged", 1, nil)
	e.produce("damaged", 0, 15, 5, kgo.NoCompression(), "dmg")
	e.ensureDestination("damaged")
	stored := e.rawBatches(e.src, "damaged", 0, 0)
	if len(stored) != 3 || stored[1].BaseOffset != 5 {
		t.Fatalf("source batches %+v, want 3 of 5 records", stored)
	}
	segs, err := filepath.Glob(filepath.Join(e.p.src.Real().Dir(), "node-*", "data", "damaged-0", "00000000000000000000.log"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("source segment of damaged-0: %v %v", segs, err)
	}
	f, err := os.OpenFile(segs[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	at := int64(len(stored[0].Raw) + len(stored[1].Raw) - 3) // inside the second batch's last record
	b := []byte{0}
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// The premise: the broker serves the damaged bytes as they are on disk.
	if again := e.rawBatches(e.src, "damaged", 0, 0); len(again) != 3 || !again[0].CRCValid() || again[1].CRCValid() {
		t.Fatalf("the source does not serve the damage: %d batches, CRCs valid %v %v", len(again), again[0].CRCValid(), len(again) > 1 && again[1].CRCValid())
	}
	c, evs := e.startCopy("damaged")
	ev := evs.waitRefused(t, "damaged batch refused", ErrCorruptBatch)
	if !strings.Contains(ev.Err.Error(), "at offset 5 ") {
		t.Fatalf("the error does not name the damaged batch's offset 5: %v", ev.Err)
	}
	pr, _ := c.Stop("damaged", 0)
	if pr.DestinationLogEnd != 5 {
		t.Fatalf("destination log end %d, want 5 (the batch before the damaged one)", pr.DestinationLogEnd)
	}
}

// testLogAppendTime checks what a CreateTime destination does with a batch
// from a LogAppendTime source topic, kept byte for byte otherwise.
func testLogAppendTime(t *testing.T, e *env) {
	e.createSource("lat", 1, map[string]*string{"message.timestamp.type": kadm.StringPtr("LogAppendTime")})
	e.produce("lat", 0, 5, 5, kgo.ZstdCompression(), "lat")
	src := e.rawBatches(e.src, "lat", 0, 0)
	if len(src) != 1 || !src[0].LogAppendTime() {
		t.Fatalf("source batches %+v", src)
	}
	e.createSource("lat-dst", 1, nil) // a source topic name, created on the source cluster only to have a name
	if resp, err := e.dstAdm.CreateTopic(e.ctx, 1, 1, map[string]*string{"message.timestamp.type": kadm.StringPtr("CreateTime"),
		"message.timestamp.before.max.ms": kadm.StringPtr(strconv.FormatInt(math.MaxInt64, 10))}, "lat-dst"); err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	if err := waitPartitionsLed(kadm.WithAuthorizedOps(e.ctx), e.dstAdm, "lat-dst", 1); err != nil {
		t.Fatal(err)
	}
	raw := append([]byte(nil), src[0].Raw...)
	Rewrite(raw, -1, -1, -1)
	if _, err := produceOne(e.ctx, e.dst, "lat-dst", 0, raw); err != nil {
		t.Fatal(err)
	}
	dst := e.rawBatches(e.dst, "lat-dst", 0, 0)
	t.Logf("fact: LogAppendTime source batch: attributes %#x maxTimestamp %d firstTimestamp %d; on a CreateTime destination: attributes %#x maxTimestamp %d firstTimestamp %d; records section identical: %v",
		src[0].Attributes, src[0].MaxTimestamp, src[0].FirstTimestamp, dst[0].Attributes, dst[0].MaxTimestamp, dst[0].FirstTimestamp,
		string(src[0].Raw[batchHeaderSize:]) == string(dst[0].Raw[batchHeaderSize:]))
	if dst[0].LogAppendTime() {
		t.Fatal("the destination kept LogAppendTime: revisit CheckCopyable")
	}

	// So the copier refuses such batches, loudly.
	e.ensureDestination("lat")
	c, evs := e.startCopy("lat")
	evs.waitRefused(t, "LogAppendTime batch refused", ErrLogAppendTimeBatch)
	if _, err := c.Stop("lat", 0); !isErr(err, ErrLogAppendTimeBatch) {
		t.Fatal(err)
	}
}

// startCopy copies partition 0 of topic with a new copier (closed at the
// end of the test) and collects its events.
func (e *env) startCopy(topic string) (*Copier, *events) {
	e.t.Helper()
	c := e.newCopier(Config{})
	e.t.Cleanup(c.Close)
	evs := &events{}
	if err := c.Start(e.ctx, Task{Topic: topic, Partition: 0, TransactionalID: "mirror-" + topic + "-0"}, evs.on); err != nil {
		e.t.Fatal(err)
	}
	return c, evs
}

// waitRefused waits for a failure retrying cannot fix and checks it is want.
func (ev *events) waitRefused(t *testing.T, what string, want error) datapath.Event {
	t.Helper()
	polltest.Eventually(t, 30*time.Second, what, func() (bool, string) {
		_, ok := ev.permanentFailure()
		return ok, fmt.Sprintf("events so far: %+v", ev.failures())
	})
	got, _ := ev.permanentFailure()
	if !isErr(got.Err, want) {
		t.Fatalf("event %v, want %v", got.Err, want)
	}
	t.Logf("reported: %v", got.Err)
	return got
}
