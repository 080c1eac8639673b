package fetcher

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// TestFakeFillerMarkerLandsLate is the regression test of the soak's
// "marker filler ... destination log end is 109 after markers that should end
// it at 107": a real coordinator answers EndTxn once the abort is prepared
// and writes the marker afterwards, so a fill that failed half-way (one
// filler's EndTxn answered, its marker still on the way, another's refused)
// must not read the log end for its next try before that marker has landed,
// or it counts one marker too few as written and writes one too many.
//
// kfake writes markers inside EndTxn, so the test makes the late marker
// itself (lateMarkers): filler 0's first EndTxn is answered at once and
// applied only when a request of that id needs the coordinator's state
// again (DescribeTransactions, InitProducerId, AddPartitionsToTxn: on a real
// coordinator those wait out PrepareAbort, by CONCURRENT_TRANSACTIONS or a
// Prepare* state), and filler 1's first EndTxn is refused. The source has
// one compacted hole of two offsets, filled by the two fillers with one
// marker each.
func TestFakeFillerMarkerLandsLate(t *testing.T) {
	p := &pair{src: kafkatest.Start(t, kafkatest.Fake()), dst: kafkatest.Start(t, kafkatest.Fake())}
	e := newEnv(t, p)
	const topic = "late-marker"
	e.createSource(topic, 1, compactedConfigs())
	write := e.keyWriter(topic, kgo.NoCompression())
	write("a")
	write("b", "c") // offsets 1 and 2: superseded below, so compacted away
	write("b", "c")
	write("z") // the last batch is never cleaned
	p.src.Fake().Compact()
	if h := e.holesIn(e.src, topic); h != 2 {
		t.Fatalf("the source has %d offsets without a record, want 2", h)
	}
	e.ensureDestination(topic)

	const txnID = "mirror-late-marker-0"
	m := &lateMarkers{fake: p.dst.Fake(), side: e.client(p.dst),
		delayed: fillerIDFor(txnID, 0), refused: fillerIDFor(txnID, 1), replaying: map[string]bool{}}
	m.install(e.ctx)

	c := e.newCopier(Config{FillerTransactions: 2})
	defer c.Close()
	e.copyToEnd(c, Task{Topic: topic, Partition: 0, TransactionalID: txnID}).noFailures()
	m.mu.Lock()
	held, refusedOnce, late := m.held, m.refusedOnce, m.pending != nil
	m.mu.Unlock()
	if !refusedOnce || held == 0 || late {
		t.Fatalf("the late marker was not exercised: refused %v, requests held for it %d, still pending %v", refusedOnce, held, late)
	}
	_, srcEnd := e.offsets(e.srcAdm, topic, 0)
	_, dstEnd := e.offsets(e.dstAdm, topic, 0)
	if dstEnd != srcEnd {
		t.Fatalf("destination log end %d, source %d: the filler wrote %d markers too many", dstEnd, srcEnd, dstEnd-srcEnd)
	}
	n := e.verifyEntries(topic, 0, false)
	t.Logf("%d records at identical offsets; %d requests waited for the late marker", n, held)
}

// lateMarkers makes one filler's first abort marker land after its EndTxn
// was answered, on a kfake destination, and refuses another filler's first
// EndTxn.
type lateMarkers struct {
	fake             *kfake.Cluster
	side             *kgo.Client // applies the late EndTxn
	delayed, refused string

	mu          sync.Mutex
	pending     *kmsg.EndTxnRequest // answered, not yet applied
	delayedOnce bool
	refusedOnce bool
	replaying   map[string]bool
	held        int
}

func (m *lateMarkers) install(ctx context.Context) {
	m.fake.ControlKey(int16(kmsg.EndTxn), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		m.fake.KeepControl()
		req := kr.(*kmsg.EndTxnRequest)
		m.mu.Lock()
		defer m.mu.Unlock()
		switch {
		case m.replaying[req.TransactionalID]:
			return nil, nil, false
		case req.TransactionalID == m.delayed && !m.delayedOnce && !req.Commit:
			m.delayedOnce = true
			late := *req
			m.pending = &late
			resp := req.ResponseKind().(*kmsg.EndTxnResponse)
			if req.Version >= 5 { // what kfake answers once it applies it
				resp.ProducerID, resp.ProducerEpoch = req.ProducerID, req.ProducerEpoch+1
			}
			return resp, nil, true
		case req.TransactionalID == m.refused && !m.refusedOnce:
			m.refusedOnce = true
			resp := req.ResponseKind().(*kmsg.EndTxnResponse)
			resp.ErrorCode = kerr.UnknownServerError.Code
			return resp, nil, true
		}
		return nil, nil, false
	})
	hold := func(ids ...string) {
		m.mu.Lock()
		late := m.pending
		if late == nil || !contains(ids, late.TransactionalID) {
			m.mu.Unlock()
			return
		}
		m.pending = nil
		m.held++
		m.replaying[late.TransactionalID] = true
		m.mu.Unlock()
		// The coordinator finishes writing the marker before it answers
		// anything else of this id.
		m.fake.SleepControl(func() {
			if _, err := late.RequestWith(ctx, m.side); err != nil {
				panic(fmt.Sprintf("applying the late EndTxn: %v", err))
			}
			m.mu.Lock()
			delete(m.replaying, late.TransactionalID)
			m.mu.Unlock()
		})
	}
	m.fake.ControlKey(int16(kmsg.DescribeTransactions), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		m.fake.KeepControl()
		hold(kr.(*kmsg.DescribeTransactionsRequest).TransactionalIDs...)
		return nil, nil, false
	})
	m.fake.ControlKey(int16(kmsg.InitProducerID), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		m.fake.KeepControl()
		if id := kr.(*kmsg.InitProducerIDRequest).TransactionalID; id != nil {
			hold(*id)
		}
		return nil, nil, false
	})
	m.fake.ControlKey(int16(kmsg.AddPartitionsToTxn), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		m.fake.KeepControl()
		req := kr.(*kmsg.AddPartitionsToTxnRequest)
		ids := []string{req.TransactionalID}
		for _, x := range req.Transactions {
			ids = append(ids, x.TransactionalID)
		}
		hold(ids...)
		return nil, nil, false
	})
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// TestFakeFillerAbsorbsDuplicateMarker: a transaction marker that Kafka writes twice while a
// long fill runs (a destination broker restarting during the soak's seed-4 run: the fill of
// 210 offsets ended three markers past its range) lands inside the range being filled, where
// it is as invisible as a filler marker. The fill counts from the log end after each round, so
// it writes one marker fewer and ends exactly at the range's end; counting only its own
// markers, it ended one past it and stopped the copy. The duplicate here repeats the last
// filler marker with WriteTxnMarkers once the fill is under way, as a coordinator does.
func TestFakeFillerAbsorbsDuplicateMarker(t *testing.T) {
	p := &pair{src: kafkatest.Start(t, kafkatest.Fake()), dst: kafkatest.Start(t, kafkatest.Fake())}
	e := newEnv(t, p)
	const topic, holes = "dup-in-fill", 40
	e.compactedHole(topic, holes)

	// The third round's first EndTxn starts the duplicate and is answered
	// CONCURRENT_TRANSACTIONS (retried by the copy) until the duplicate is in the log, so that
	// it lands while the fill runs.
	var (
		mu       sync.Mutex
		endTxns  int
		dupAt    int64 = -1
		dupErr   error
		dupFired bool
		dupDone  bool
	)
	p.dst.Fake().ControlKey(int16(kmsg.EndTxn), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		p.dst.Fake().KeepControl()
		req := kr.(*kmsg.EndTxnRequest)
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(req.TransactionalID, "-f") || dupDone {
			return nil, nil, false
		}
		if !dupFired {
			if endTxns++; endTxns < 9 {
				return nil, nil, false
			}
			dupFired = true
			go func() { // not from inside kfake's request loop
				at, err := e.duplicateLastMarker(topic)
				mu.Lock()
				dupAt, dupErr, dupDone = at, err, true
				mu.Unlock()
			}()
		}
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.ConcurrentTransactions.Code
		return resp, nil, true
	})

	c := e.newCopier(Config{FillerTransactions: 4})
	defer c.Close()
	evs := e.copyToEnd(c, Task{Topic: topic, Partition: 0, TransactionalID: "mirror-dup-in-fill-0"})
	mu.Lock()
	at, err := dupAt, dupErr
	mu.Unlock()
	if err != nil || at < 1 || at >= 1+holes {
		t.Fatalf("the duplicate marker was not written inside the fill: offset %d, %v", at, err)
	}
	pr, _ := c.Progress(topic, 0)
	if pr.FillerMarkers != holes-1 {
		t.Errorf("the fill wrote %d markers; with the duplicate in its range it needs %d", pr.FillerMarkers, holes-1)
	}
	evs.noFailures()
	n := e.verifyEntries(topic, 0, true)
	t.Logf("%d entries at identical offsets; the duplicate landed at %d, inside the fill", n, at)
}

// duplicateLastMarker writes the destination partition's last marker again once there is
// one, and returns the offset the duplicate got.
func (e *env) duplicateLastMarker(topic string) (int64, error) {
	for {
		entries, err := LogEntries(e.ctx, e.dst, topic, 0, 0)
		if err != nil {
			return -1, err
		}
		for i := len(entries) - 1; i >= 0; i-- {
			if m := entries[i]; m.Control {
				before := entries[len(entries)-1].Offset
				e.duplicateMarker(topic, 0, m)
				after, err := LogEntries(e.ctx, e.dst, topic, 0, before+1)
				if err != nil {
					return -1, err
				}
				for _, x := range after {
					if x.Control && x.Producer == m.Producer && x.Epoch == m.Epoch {
						return x.Offset, nil
					}
				}
				return -1, fmt.Errorf("the duplicate of producer %d epoch %d is not in the log after offset %d", m.Producer, m.Epoch, before)
			}
		}
		if err := sleepCtx(e.ctx, 5*time.Millisecond); err != nil {
			return -1, err
		}
	}
}

// TestFakeStopInterruptsFill: a stop does not wait for a long fill to end (a fill of
// thousands of holes runs for minutes, and a handover's stop holds the coordinators'
// rebalance meanwhile); the fill yields at its next marker, and the next owner fills the rest,
// counted from the log end, to exactly the range's end.
func TestFakeStopInterruptsFill(t *testing.T) {
	p := &pair{src: kafkatest.Start(t, kafkatest.Fake()), dst: kafkatest.Start(t, kafkatest.Fake())}
	e := newEnv(t, p)
	const topic, holes = "stop-in-fill", 200
	e.compactedHole(topic, holes)
	// Each filler marker takes a few milliseconds, so the fill lasts about a second.
	p.dst.Fake().ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		p.dst.Fake().KeepControl()
		time.Sleep(5 * time.Millisecond)
		return nil, nil, false
	})
	task := Task{Topic: topic, Partition: 0, TransactionalID: "mirror-stop-in-fill-0"}
	first := e.newCopier(Config{FillerTransactions: 1})
	if err := first.Start(e.ctx, task, nil); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, 30*time.Second, "the fill under way", func() (bool, string) {
		pr, _ := first.Progress(topic, 0)
		return pr.FillerMarkers >= 10, fmt.Sprintf("%d filler markers", pr.FillerMarkers)
	})
	pr, err := first.Stop(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	if pr.FillerMarkers >= holes/2 {
		t.Fatalf("the stop returned after %d of %d filler markers: it waited for the fill", pr.FillerMarkers, holes)
	}

	second := e.newCopier(Config{FillerTransactions: 4})
	defer second.Close()
	e.copyToEnd(second, task).noFailures()
	rest, _ := second.Progress(topic, 0)
	if pr.FillerMarkers+rest.FillerMarkers != holes {
		t.Errorf("the two owners wrote %d + %d filler markers for %d holes", pr.FillerMarkers, rest.FillerMarkers, holes)
	}
	e.verifyEntries(topic, 0, true)
	t.Logf("the stop returned after %d filler markers; the next owner wrote the other %d", pr.FillerMarkers, rest.FillerMarkers)
}

// compactedHole makes a compacted one-partition topic on the kfake source
// whose log has one hole of holes offsets after its first record (a batch
// per key, each superseded by one batch of them all, then compacted), and
// creates its destination.
func (e *env) compactedHole(topic string, holes int) {
	e.t.Helper()
	e.createSource(topic, 1, compactedConfigs())
	write := e.keyWriter(topic, kgo.NoCompression())
	write("a")
	keys := make([]string, holes)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		write(keys[i])
	}
	write(keys...)
	write("z") // the last batch is never cleaned
	e.p.src.Fake().Compact()
	if h := e.holesIn(e.src, topic); h != holes {
		e.t.Fatalf("the source has %d offsets without a record, want %d", h, holes)
	}
	e.ensureDestination(topic)
}
