package fetcher

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/internal/polltest"
)

// Two owners of one partition: the old one (A) is frozen with batches
// fetched but not written, the new one (B) takes over with the same writer
// and copies on. When A wakes up, the lease it asks first holds it back;
// and should A still write (it passed the lease check just before it froze),
// its writes are the very ones B made: the destination deduplicates them.
// No duplicate, no misaligned offset either way.
func testZombie(t *testing.T, e *env) {
	for _, leased := range []bool{true, false} {
		t.Run(fmt.Sprintf("leased=%v", leased), func(t *testing.T) {
			e := newEnv(t, e.p)
			topic := fmt.Sprintf("zombie-%v", leased)
			e.createSource(topic, 1, nil)
			e.produce(topic, 0, 100, 10, kgo.ZstdCompression(), "z1")
			e.ensureDestination(topic)
			writer, err := NewWriter(e.ctx, e.dst)
			if err != nil {
				t.Fatal(err)
			}
			task := Task{Topic: topic, Partition: 0, TransactionalID: "mirror-" + topic + "-0", Writer: &writer}
			var lost atomic.Bool
			a := e.newCopier(Config{Lease: func() error {
				if leased && lost.Load() {
					return fmt.Errorf("lease lost")
				}
				return nil
			}})
			defer a.Close()
			var aEvs events
			if err := a.Start(e.ctx, task, aEvs.on); err != nil {
				t.Fatal(err)
			}
			e.waitCopied(a, topic, 0)
			a.hold(topic, 0, false, true) // A fetches but does not append
			e.produce(topic, 0, 50, 10, kgo.ZstdCompression(), "z2")
			polltest.Eventually(t, 30*time.Second, "A buffered the new batches", func() (bool, string) {
				a.mu.Lock()
				defer a.mu.Unlock()
				return len(a.parts[topicPartition{topic, 0}].queue) > 0, ""
			})
			lost.Store(true)
			before, _ := a.Progress(topic, 0)

			b := e.newCopier(Config{})
			defer b.Close()
			var bEvs events
			if err := b.Start(e.ctx, task, bEvs.on); err != nil {
				t.Fatal(err)
			}
			e.waitCopied(b, topic, 0)
			a.hold(topic, 0, false, false) // the zombie wakes up
			e.produce(topic, 0, 30, 10, kgo.ZstdCompression(), "z3")
			e.waitCopied(b, topic, 0)
			if _, err := b.Stop(topic, 0); err != nil {
				t.Fatal(err)
			}
			pa, errA := a.Stop(topic, 0)
			if f := bEvs.failures(); len(f) > 0 {
				t.Fatalf("B events: %+v", f)
			}
			for _, ev := range aEvs.failures() {
				if ev.Kind == datapath.EventFailed && !datapath.Retriable(ev.Err) {
					t.Fatalf("A failed non-retriably: %v", ev.Err)
				}
			}
			if leased && pa.RecordsCopied != before.RecordsCopied {
				t.Fatalf("A copied %d records after losing its lease", pa.RecordsCopied-before.RecordsCopied)
			}
			t.Logf("A stopped with %v after copying %d records", errA, pa.RecordsCopied)
			e.verifyPartition(topic, 0)
		})
	}
}
