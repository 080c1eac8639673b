package fetcher_test

// Read-ahead (ahead.go) on real Kafka: one partition alone on its source
// broker, fetched through a Toxiproxy hop whose answers come late and
// unevenly, so a partition's Fetches overtake each other. Record sizes vary
// at random, so the guessed offsets of the read-ahead Fetches land both short
// of where the answer before them ends (a re-read) and past it (a gap the
// cursor's own Fetch fills). Committed and aborted transactions put control
// batches and a moving last stable offset in the way, and the leader moves
// mid-copy. Every entry must still land at its source offset, once.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/faultnet"
	"github.com/kmirror/kmirror/internal/mirrortest"
)

func TestRealReadAheadOfALonePartitionStaysExact(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	const topic = "ahead"
	h := startHopEnv(ctx, t, topic, 1)
	front, srcCl, dstCl, srcAdm, fetches := h.front, h.srcCl, h.dstCl, h.srcAdm, &h.fetches
	rng := rand.New(rand.NewPCG(7, 21))
	// Uncompressed: a batch's size follows its records' (compressed, the
	// padded values shrink to a few bytes and a Fetch holds hundreds).
	opts := []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(8 << 10),
		kgo.ProducerBatchCompression(kgo.NoCompression())}
	w := aheadWriter{plain: h.src.Client(t, append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))...),
		txn: h.src.Client(t, append(opts, kgo.TransactionalID("ahead-writer"))...), rng: rng}
	w.write(ctx, t, topic, 400, "before")
	// 16 KiB a Fetch and room for several: a lone partition's copy is many
	// Fetches, several of them read ahead.
	c := h.copier(ctx, t, topic)
	if err := front.AddAll(faultnet.Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 60, "jitter": 50}}); err != nil {
		t.Fatal(err)
	}
	// A backlog before the copy starts: a copy that keeps up has nothing to
	// read ahead of.
	w.write(ctx, t, topic, 1200, "delayed")
	failed := startAll(ctx, t, c, topic, 1)
	waitCopied(ctx, t, c, srcAdm, topic, 1, failed)
	// One partition: more than one Fetch in flight to its broker is read-ahead.
	if most := fetches.max(); most < 2 {
		t.Fatalf("at most %d Fetch in flight to the lone partition's broker: nothing was read ahead", most)
	}
	pr, _ := c.Progress(topic, 0)
	t.Logf("read-ahead answers applied %d, of them after a gap %d; bytes re-read %d", pr.ReadAheadAnswers, pr.ReadAheadGaps, pr.RereadBytes)
	// Records of random sizes make the guesses miss both ways (161 answers, 10
	// of them after a gap, 1.3 MB re-read when written): both paths must have
	// run for the check below to mean anything.
	if pr.ReadAheadAnswers == 0 || pr.ReadAheadGaps == 0 || pr.RereadBytes == 0 {
		t.Fatal("the copy did not read ahead both short of and past where answers ended")
	}
	mirrortest.VerifyLog(t, srcCl, dstCl, false, topic) // markers and aborted records too

	w.write(ctx, t, topic, 300, "moving")
	moveLeaders(ctx, t, srcAdm, topic)
	w.write(ctx, t, topic, 600, "after-move")
	waitCopied(ctx, t, c, srcAdm, topic, 1, failed)
	mirrortest.VerifyLog(t, srcCl, dstCl, false, topic) // markers and aborted records too
	t.Logf("at most %d Fetches in flight to one source broker", fetches.max())
}

// aheadWriter writes records of random sizes to partition 0, plain and in
// transactions, a third of them aborted.
type aheadWriter struct {
	plain, txn *kgo.Client
	rng        *rand.Rand
}

func (w aheadWriter) write(ctx context.Context, t *testing.T, topic string, n int, tag string) {
	t.Helper()
	for i := 0; i < n; {
		k := min(n-i, 20+w.rng.IntN(80))
		recs := make([]*kgo.Record, 0, k)
		for j := range k {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: 0, Key: fmt.Appendf(nil, "%s-%d", tag, i+j),
				Value: fmt.Appendf(nil, "%s-%d-%0*d", tag, i+j, 10+w.rng.IntN(1500), i+j)})
		}
		if w.rng.IntN(3) == 0 {
			w.transaction(ctx, t, recs, w.rng.IntN(3) != 0)
		} else if err := w.plain.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", tag, err)
		}
		i += k
	}
}

func (w aheadWriter) transaction(ctx context.Context, t *testing.T, recs []*kgo.Record, commit bool) {
	t.Helper()
	if err := w.txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := w.txn.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("transactional produce: %v", err)
	}
	if err := w.txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("end transaction (commit %v): %v", commit, err)
	}
}
