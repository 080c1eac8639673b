package fetcher

import (
	"context"
	"fmt"
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
	var evs events
	if err := c.Start(e.ctx, Task{Topic: topic, Partition: 0, TransactionalID: txnID}, evs.on); err != nil {
		t.Fatal(err)
	}
	_, srcEnd := e.offsets(e.srcAdm, topic, 0)
	polltest.Eventually(t, time.Minute, "the copy caught up, or failed", func() (bool, string) {
		if ev, bad := evs.permanentFailure(); bad {
			t.Fatalf("the copy failed: %v", ev.Err)
		}
		pr, _ := c.Progress(topic, 0)
		return pr.DestinationLogEnd == srcEnd, fmt.Sprintf("destination log end %d of %d", pr.DestinationLogEnd, srcEnd)
	})
	if f := evs.failures(); len(f) > 0 {
		t.Fatalf("events: %+v", f)
	}
	m.mu.Lock()
	held, refusedOnce, late := m.held, m.refusedOnce, m.pending != nil
	m.mu.Unlock()
	if !refusedOnce || held == 0 || late {
		t.Fatalf("the late marker was not exercised: refused %v, requests held for it %d, still pending %v", refusedOnce, held, late)
	}
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
