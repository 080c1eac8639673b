package statuspage

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/protocol"
)

// fakeSource answers samples from a status the test changes.
type fakeSource struct {
	mu  sync.Mutex
	st  Status
	err error
}

func (f *fakeSource) Status(context.Context) (Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st, f.err
}

func str(s string) *string { return &s }

func partition(p int32, state string, src, dst int64) protocol.DescribeMirrorsResponsePartition {
	return protocol.DescribeMirrorsResponsePartition{Partition: p, State: state, SourceHighWatermark: src,
		DestinationHighWatermark: dst, Lag: src - dst, LastMirroredOffset: -1, RecordsAtRisk: src - dst, AtRiskAgeMs: 1500}
}

func status(dst int64) Status {
	failed := partition(1, "FAILED", 10, 10)
	failed.ErrorMessage = str("source topic was deleted or re-created")
	return Status{
		Mirrors: []protocol.DescribeMirrorsResponseMirror{{
			Name: "m1",
			Topics: []protocol.DescribeMirrorsResponseTopic{
				{Name: "orders", Partitions: []protocol.DescribeMirrorsResponsePartition{partition(0, "MIRRORING", 100, dst), failed}},
				{Name: "<script>alert(1)</script>", Partitions: []protocol.DescribeMirrorsResponsePartition{partition(0, "PAUSED", 5, 5)}},
			},
			Syncs: []protocol.DescribeMirrorsResponseSync{{Job: "topics", LastSuccessAgeMs: 2000, LastRunAgeMs: 2000},
				{Job: "groups", LastSuccessAgeMs: -1, LastRunAgeMs: 1000, ErrorMessage: str("GROUP_AUTHORIZATION_FAILED")}},
		}},
		Instances: []coordinator.Member{{ID: "kmirror-state-1", Host: "/10.0.0.1", Self: true, StatePartitions: []int32{0, 1, 2, 5},
			Mirrors: []string{"m1"}, Partitions: []coordinator.OwnedPartition{{Mirror: "m1", Topic: "orders", Partition: 0}, {Mirror: "m1", Topic: "orders", Partition: 1}}}},
		Routes: []protocol.DescribeMirrorsResponseRoute{
			{Name: "payments", Mirror: "m1", Bootstrap: "0.0.0.0:19092", Upstream: "primary", ClusterID: str("prim-ary"), Open: true,
				Step: "IDLE", SwitchAgeMs: -1, DurationMs: -1, FreezeMs: -1, RecordsAtRisk: -1},
			{Name: "billing", Mirror: "m1", Bootstrap: "0.0.0.0:19192", Upstream: "standby", Open: true, Attempt: 2, Step: "SWITCHED",
				SwitchAgeMs: 60_000, DurationMs: 3_250, FreezeMs: 2_900, RecordsAtRisk: -1,
				Steps: []protocol.DescribeMirrorsResponseRouteStep{{Step: "FREEZING", DurationMs: 20}, {Step: "DRAINING", DurationMs: 2_500}}},
			{Name: "ledger", Mirror: "m1", Bootstrap: "0.0.0.0:19292", Upstream: "primary", Attempt: 1, Step: "ROLLED_BACK",
				Reason: str("drain timeout: orders/0 lags 5 records"), SwitchAgeMs: 1_000, DurationMs: 60_000, FreezeMs: 60_000, RecordsAtRisk: -1},
		},
	}
}

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPageShowsTheLastSample(t *testing.T) {
	src := &fakeSource{st: status(40)}
	clock := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	p := New(Config{Source: src, Every: 10 * time.Second})
	p.now = func() time.Time { return clock }
	h := p.Handler()

	if b := body(t, get(t, h, "GET", "/")); !strings.Contains(b, `id="collecting"`) {
		t.Fatalf("before the first sample the page should say it is collecting:\n%s", b)
	}
	p.sample(context.Background())
	clock = clock.Add(10 * time.Second)
	src.st = status(70) // 30 records copied in 10 s
	p.sample(context.Background())
	clock = clock.Add(3 * time.Second)

	resp := get(t, h, "GET", "/")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
		t.Fatalf("CSP %q should forbid everything but the page's own style and icon", csp)
	}
	b := body(t, resp)
	for _, want := range []string{
		`data-topic="orders" data-partition="1" data-state="FAILED"`,
		`source topic was deleted or re-created`,
		`data-topic="orders" data-partition="0" data-state="MIRRORING" data-lag="30"`,
		`id="failed-count">1<`,
		`id="total-lag">30<`,
		`<td>groups</td><td>never</td><td>4 s ago</td><td><span class="error">GROUP_AUTHORIZATION_FAILED</span>`,
		`<td>topics</td><td>5 s ago</td>`,
		`this instance`, `0-2, 5`, `m1 / orders: 0-1`, `10.0.0.1`,
		`&lt;script&gt;alert(1)&lt;/script&gt;`,
		`id="chart-throughput" data-samples="1"`, `now 3</span>`, // 30 records in 10 s
		`id="chart-lag" data-samples="2"`,
		`sampled 12:00:10 UTC (3 s ago)`,
		`data-route="payments" data-upstream="primary" data-step="IDLE" data-attempt="0"><td>payments</td><td>0.0.0.0:19092</td><td>primary</td><td>m1</td><td>prim-ary</td><td>IDLE</td><td>never switched</td>`,
		`<td>SWITCHED (attempt 2)</td><td>began 1 min 3 s ago; took 3.250 s; writes frozen 2.900 s; steps: FREEZING 0.020 s, DRAINING 2.500 s</td>`,
		`<td>ledger <span class="error">(closed: applying the switch state)</span></td>`,
		`took 1 min 0 s; writes frozen 1 min 0 s<br><span class="message">drain timeout: orders/0 lags 5 records</span>`,
	} {
		if !strings.Contains(b, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(b, "<script>") {
		t.Error("a topic name reached the page unescaped")
	}
	if m := regexp.MustCompile(`(?i)(src|href)="(https?:)?//`).FindString(b); m != "" {
		t.Errorf("the page makes an external request: %s", m)
	}
	if t.Failed() {
		t.Log(b)
	}
}

func TestPageKeepsTheLastGoodSampleAndSaysWhy(t *testing.T) {
	src := &fakeSource{st: status(40)}
	p := New(Config{Source: src})
	p.sample(context.Background())
	src.err = errors.New("describing group kmirror-coordinators: NOT_COORDINATOR")
	p.sample(context.Background())
	b := body(t, get(t, p.Handler(), "GET", "/"))
	if !strings.Contains(b, "the last sample failed: describing group kmirror-coordinators: NOT_COORDINATOR") || !strings.Contains(b, `data-state="FAILED"`) {
		t.Fatalf("the page should keep the last sample and say why it is not newer:\n%s", b)
	}
}

func TestPageIsReadOnly(t *testing.T) {
	h := New(Config{Source: &fakeSource{}}).Handler()
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"POST", "/", http.StatusMethodNotAllowed},
		{"DELETE", "/", http.StatusMethodNotAllowed},
		{"GET", "/nothing", http.StatusNotFound},
		{"GET", "/static/page.html", http.StatusNotFound},
		{"GET", "/static/favicon.svg", http.StatusOK},
		{"GET", "/static/style.css", http.StatusOK},
		{"HEAD", "/", http.StatusOK},
	} {
		if r := get(t, h, c.method, c.path); r.StatusCode != c.code {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, r.StatusCode, c.code)
		}
	}
}

func TestHistoryIsBounded(t *testing.T) {
	h := newHistory(360)
	at := time.Unix(0, 0)
	for i := range 1000 {
		h.add(at.Add(time.Duration(i)*10*time.Second), status(int64(i)).Mirrors)
	}
	s := h.series()
	if len(s) != 360 || len(h.points) != 360 {
		t.Fatalf("%d points kept (%d slots), want 360", len(s), len(h.points))
	}
	if !s[0].at.Equal(at.Add(640*10*time.Second)) || !s[359].at.Equal(at.Add(999*10*time.Second)) {
		t.Fatalf("series spans %v..%v, want the last 360 samples oldest first", s[0].at, s[359].at)
	}
	// One record per 10 s on the MIRRORING partition; the FAILED one does not grow.
	if s[359].rate != 0.1 {
		t.Fatalf("rate %v, want 0.1 records/s", s[359].rate)
	}
}

func TestRanges(t *testing.T) {
	for in, want := range map[string][]int32{"none": nil, "3": {3}, "0-3, 7, 9-10": {9, 0, 1, 2, 3, 7, 10}} {
		if got := ranges(in2(want)); got != in {
			t.Errorf("ranges(%v) = %q, want %q", want, got, in)
		}
	}
}

func in2(ps []int32) []int32 { return append([]int32(nil), ps...) }
