package apis

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// rpoSampleInterval is how often an RPOSampler reads the recovery point.
const rpoSampleInterval = 10 * time.Second

// RPOSampler keeps the recovery point of the mirrors whose mirror-level
// records this instance coordinates (one instance per mirror, as for the
// sync jobs, so the clusters are asked once whatever the number of
// instances) and publishes it as gauges. Reading it costs ListOffsets on
// both clusters and a fetch from the source, so it is sampled in the
// background rather than at scrape time: a scrape never waits on a remote
// cluster. The age is taken from the sampled record's timestamp at scrape
// time, so it keeps growing between samples and while the source cannot be
// read.
type RPOSampler struct {
	b     *Backend
	every time.Duration

	mu      sync.Mutex
	mirrors map[string][]partitionSample
}

// partitionSample is one partition's recovery point as last sampled.
type partitionSample struct {
	topic     string
	partition int32
	records   int64     // -1 unknown
	oldest    time.Time // the oldest record at risk; zero when none or unknown
	ageKnown  bool
}

// NewRPOSampler returns a sampler for b's mirrors, every 10 s unless every
// is positive.
func NewRPOSampler(b *Backend, every time.Duration) *RPOSampler {
	if every <= 0 {
		every = rpoSampleInterval
	}
	return &RPOSampler{b: b, every: every, mirrors: map[string][]partitionSample{}}
}

// Run samples until ctx ends.
func (s *RPOSampler) Run(ctx context.Context) {
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for {
		s.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *RPOSampler) sample(ctx context.Context) {
	var names []string
	s.b.Coord.Store().Read(func(v *statetopic.View) { names = v.MirrorNames() })
	next := map[string][]partitionSample{}
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		if !s.b.Coord.OwnsMirror(name) {
			continue
		}
		mctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		m := s.b.describeMirror(mctx, name)
		cancel()
		if m.ErrorCode != 0 {
			continue
		}
		now := s.b.now()
		var parts []partitionSample
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				if p.FailingOver() {
					continue
				}
				ps := partitionSample{topic: t.Name, partition: p.Partition, records: p.RecordsAtRisk, ageKnown: p.AtRiskAgeMs >= 0}
				if p.RecordsAtRisk > 0 && p.AtRiskAgeMs >= 0 {
					ps.oldest = now.Add(-time.Duration(p.AtRiskAgeMs) * time.Millisecond)
				}
				parts = append(parts, ps)
			}
		}
		next[name] = parts
	}
	s.mu.Lock()
	s.mirrors = next
	s.mu.Unlock()
}

// RegisterMetrics publishes the sampled recovery point on meter, per
// partition of each mirror this instance coordinates. Unknown figures are
// not reported: a missing series is honest, a 0 would say "nothing at risk".
func (s *RPOSampler) RegisterMetrics(meter metric.Meter) error {
	records, err := meter.Int64ObservableGauge("kmirror.mirror.at_risk.records",
		metric.WithDescription("Records a failover right now would lose: source high watermark minus destination log end (an open source transaction counts), per partition not yet failed over."))
	if err != nil {
		return fmt.Errorf("recovery point metrics: %w", err)
	}
	seconds, err := meter.Float64ObservableGauge("kmirror.mirror.at_risk.seconds", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest record a failover right now would lose, by the record's own timestamp (CreateTime, set by the producer); 0 when caught up."))
	if err != nil {
		return fmt.Errorf("recovery point metrics: %w", err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		now := s.b.now()
		s.mu.Lock()
		defer s.mu.Unlock()
		for name, parts := range s.mirrors {
			// Ownership moves between samples: the new owner reports from
			// its first sample on, the old one stops at once.
			if !s.b.Coord.OwnsMirror(name) {
				continue
			}
			for _, p := range parts {
				if p.records < 0 {
					continue
				}
				attrs := metric.WithAttributes(attribute.String("mirror", name), attribute.String("topic", p.topic),
					attribute.String("partition", strconv.Itoa(int(p.partition))))
				o.ObserveInt64(records, p.records, attrs)
				switch {
				case p.records == 0:
					o.ObserveFloat64(seconds, 0, attrs)
				case p.ageKnown:
					o.ObserveFloat64(seconds, max(0, now.Sub(p.oldest).Seconds()), attrs)
				}
			}
		}
		return nil
	}, records, seconds)
	if err != nil {
		return fmt.Errorf("recovery point metrics: %w", err)
	}
	return nil
}
