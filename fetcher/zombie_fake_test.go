package fetcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// A woken zombie must not fence the owner that took its partitions over.
// TestFrozenInstanceWakesUpAsZombie (e2e) found one that did: frozen after
// DescribeTransactions said a source producer's transactional id was new,
// it woke up after the new owner had created the id and sent its
// InitProducerId anyway, which aborted the new owner's open transaction.
// A control operation asked the lease only when it started. Here the lease
// lapses the instant the destination answers the copy's DescribeTransactions
// (where that instance froze): no InitProducerId of the id may reach the
// destination while it is lapsed, and once it is back the copy completes,
// exactly.
func TestFakeLapsedLeaseSendsNoTransactionWrite(t *testing.T) {
	p := &pair{src: kafkatest.Start(t, kafkatest.Fake()), dst: kafkatest.Start(t, kafkatest.Fake())}
	e := newEnv(t, p)
	e.createSource("zombie", 1, nil)
	tx := e.txnProducer("app")
	e.begin(tx)
	e.produceIn(tx, "zombie", 0, 3, "t1")
	e.end(tx, true)
	e.ensureDestination("zombie")

	var lapsed, lapsedOnce atomic.Bool
	var initsWhileLapsed atomic.Int32
	fake := p.dst.Fake()
	fake.ControlKey(int16(kmsg.DescribeTransactions), func(kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		if lapsedOnce.CompareAndSwap(false, true) {
			lapsed.Store(true)
		}
		return nil, nil, false
	})
	fake.ControlKey(int16(kmsg.InitProducerID), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		if id := kr.(*kmsg.InitProducerIDRequest).TransactionalID; id != nil && strings.Contains(*id, "-p") && lapsed.Load() {
			initsWhileLapsed.Add(1)
		}
		return nil, nil, false
	})
	log := &retryLog{}
	c := e.newCopier(Config{Logger: slog.New(log), Lease: func() error {
		if lapsed.Load() {
			return errors.New("group membership lost")
		}
		return nil
	}})
	defer c.Close()
	evs := &events{t: t}
	if err := c.Start(e.ctx, Task{Topic: "zombie", Partition: 0, TransactionalID: "mirror-zombie-0"}, evs.on); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, time.Minute, "the transaction's begin refused for the lapsed lease", func() (bool, string) {
		if n := initsWhileLapsed.Load(); n > 0 {
			t.Fatalf("%d InitProducerId requests of the copy's transactional id reached the destination with the lease lapsed", n)
		}
		return log.refused(), fmt.Sprintf("lapsed %v", lapsed.Load())
	})
	lapsed.Store(false)
	e.waitCopied(c, "zombie", 0)
	evs.noFailures()
	e.verifyEntries("zombie", 0, false)
}

// retryLog records whether the copier retried an operation because its lease
// had lapsed (its debug "retrying" line).
type retryLog struct {
	mu   sync.Mutex
	seen bool
}

func (l *retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *retryLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *retryLog) WithGroup(string) slog.Handler            { return l }

func (l *retryLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "retrying" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			if err, ok := a.Value.Any().(error); ok && errors.Is(err, errLeaseLapsed) {
				l.mu.Lock()
				l.seen = true
				l.mu.Unlock()
			}
		}
		return true
	})
	return nil
}

func (l *retryLog) refused() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen
}
