package sourceclient

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ThrottleWindow is how far back Throttles.Recent looks: long enough to
// span several throttled fetches of a quota that is hit steadily, short
// enough that a lifted quota stops being reported soon after.
const ThrottleWindow = 30 * time.Second

// Throttles records, per mirror, the time the source brokers throttled the
// mirror's client (throttle_time_ms in their responses, KIP-219). franz-go
// itself holds the connection's next request back for that long, as the
// broker expects (the Fetch a copy sends on kgo.Broker included); this only
// makes the throttling visible, in metrics and describe.
type Throttles struct {
	mu sync.Mutex
	m  map[string]*throttled
}

type throttled struct {
	clientID string
	total    time.Duration
	recent   []throttleEvent // within ThrottleWindow, oldest first
}

type throttleEvent struct {
	at time.Time
	d  time.Duration
}

// Throttle is what Throttles.Recent reports of one mirror.
type Throttle struct {
	ClientID string        // the id the source brokers throttled
	Total    time.Duration // since this instance built the mirror's client, summed over connections
	Recent   time.Duration // within the last ThrottleWindow, summed over connections
}

func newThrottles() *Throttles { return &Throttles{m: map[string]*throttled{}} }

// hook is a franz-go hook that records the throttling of mirror's client.
func (t *Throttles) hook(mirror string) kgo.Hook {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[mirror] == nil {
		t.m[mirror] = &throttled{}
	}
	return throttleHook{t, mirror}
}

// named records the client id the mirror's client says, which the
// source's quotas match.
func (t *Throttles) named(mirror, clientID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.m[mirror]; e != nil {
		e.clientID = clientID
	}
}

func (t *Throttles) record(mirror string, d time.Duration, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[mirror]
	if e == nil {
		return // dropped meanwhile (mirror deleted)
	}
	e.total += d
	e.recent = append(prune(e.recent, now), throttleEvent{now, d})
}

// prune drops the events older than ThrottleWindow.
func prune(evs []throttleEvent, now time.Time) []throttleEvent {
	i := 0
	for i < len(evs) && now.Sub(evs[i].at) > ThrottleWindow {
		i++
	}
	return append(evs[:0], evs[i:]...)
}

// Recent reports the mirror's throttling as of now; ok is false when its
// source brokers have not throttled it within ThrottleWindow.
func (t *Throttles) Recent(mirror string, now time.Time) (Throttle, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[mirror]
	if e == nil {
		return Throttle{}, false
	}
	e.recent = prune(e.recent, now)
	out := Throttle{ClientID: e.clientID, Total: e.total}
	for _, ev := range e.recent {
		out.Recent += ev.d
	}
	return out, len(e.recent) > 0
}

func (t *Throttles) drop(mirror string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, mirror)
}

type throttleHook struct {
	t      *Throttles
	mirror string
}

// OnBrokerThrottle implements kgo.HookBrokerThrottle.
func (h throttleHook) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	h.t.record(h.mirror, d, time.Now())
}

// RegisterMetrics publishes kmirror.mirror.source.throttle.seconds: per
// mirror and source client id, the time the source brokers throttled this
// instance's connections for the mirror, summed over connections
// (fetch.max.in.flight of them per source broker). Its rate over that
// number is the share of time a source quota holds the copy back.
func (t *Throttles) RegisterMetrics(meter metric.Meter) error {
	secs, err := meter.Float64ObservableCounter("kmirror.mirror.source.throttle.seconds", metric.WithUnit("s"),
		metric.WithDescription("Time the source brokers throttled this instance's connections for the mirror (throttle_time_ms, a source quota on its client id), summed over its connections: a broker throttles each of them (fetch.max.in.flight connections per broker)."))
	if err != nil {
		return fmt.Errorf("source throttle metric: %w", err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t.mu.Lock()
		defer t.mu.Unlock()
		for mirror, e := range t.m {
			o.ObserveFloat64(secs, e.total.Seconds(),
				metric.WithAttributes(attribute.String("mirror", mirror), attribute.String("client_id", e.clientID)))
		}
		return nil
	}, secs)
	if err != nil {
		return fmt.Errorf("source throttle metric: %w", err)
	}
	return nil
}
