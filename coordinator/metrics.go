package coordinator

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// RegisterMetrics publishes mirroring metrics on meter: partitions by state
// (from the state every instance tails) and, for the partitions this instance
// copies, lag in records and seconds and what was copied. They are observed
// at scrape time, so nothing is computed while nobody looks.
func (c *Coordinator) RegisterMetrics(meter metric.Meter) error {
	states, err := meter.Int64ObservableGauge("kmirror.mirror.partitions",
		metric.WithDescription("Mirror partitions by state (every instance reports the whole cluster's view)."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	lagRecords, err := meter.Int64ObservableGauge("kmirror.mirror.lag.records",
		metric.WithDescription("Source high watermark minus destination log end, per partition this instance copies."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	lagSeconds, err := meter.Float64ObservableGauge("kmirror.mirror.lag.seconds", metric.WithUnit("s"),
		metric.WithDescription("How far behind the copy is in time: age of the newest copied batch's timestamp while records are waiting, else 0."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	copiedBytes, err := meter.Int64ObservableCounter("kmirror.mirror.copied.bytes", metric.WithUnit("By"),
		metric.WithDescription("Source batch bytes appended to the destination by this instance's current copies."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	copiedRecords, err := meter.Int64ObservableCounter("kmirror.mirror.copied.records",
		metric.WithDescription("Source records appended to the destination by this instance's current copies."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		counts := map[[2]string]int64{}
		c.store.Read(func(v *statetopic.View) {
			for _, name := range v.MirrorNames() {
				m := v.Mirror(name)
				for _, t := range m.Topics {
					for p := int32(0); p < t.Partitions; p++ {
						s := protocol.MirrorStateUnknown
						if ps := m.Partitions[statetopic.PartitionID{SourceTopicID: t.SourceTopicID, Partition: p}]; ps != nil {
							s = ps.State
						}
						counts[[2]string{name, s.String()}]++
					}
				}
			}
		})
		for k, n := range counts {
			o.ObserveInt64(states, n, metric.WithAttributes(attribute.String("mirror", k[0]), attribute.String("state", k[1])))
		}
		now := time.Now()
		for _, ref := range c.ownedRefs() {
			pr, ok := c.cfg.DataPath.Progress(ref)
			if !ok {
				continue
			}
			attrs := metric.WithAttributes(attribute.String("mirror", ref.Mirror), attribute.String("topic", ref.Topic),
				attribute.String("partition", strconv.Itoa(int(ref.Partition))))
			lag := max(0, pr.SourceHighWatermark-pr.DestinationLogEnd)
			o.ObserveInt64(lagRecords, lag, attrs)
			secs := 0.0
			if lag > 0 && !pr.LastCopiedTimestamp.IsZero() {
				secs = max(0, now.Sub(pr.LastCopiedTimestamp).Seconds())
			}
			o.ObserveFloat64(lagSeconds, secs, attrs)
			o.ObserveInt64(copiedBytes, pr.BytesCopied, attrs)
			o.ObserveInt64(copiedRecords, pr.RecordsCopied, attrs)
		}
		return nil
	}, states, lagRecords, lagSeconds, copiedBytes, copiedRecords)
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	if err := c.registerLossMetrics(meter); err != nil {
		return err
	}
	if err := c.registerWorkMetrics(meter); err != nil {
		return err
	}
	if err := c.registerReadAheadMetrics(meter); err != nil {
		return err
	}
	return registerSyncMetrics(meter, c.store)
}

// registerReadAheadMetrics publishes, per mirror, what this instance's copies read ahead
// (fetcher/ahead.go): the answers applied and the bytes fetched twice. Per mirror, not per
// partition: only a partition alone on its source broker reads ahead, and a series per
// partition would add thousands for a figure that is zero for almost all of them.
func (c *Coordinator) registerReadAheadMetrics(meter metric.Meter) error {
	answers, err := meter.Int64ObservableCounter("kmirror.mirror.read_ahead.answers",
		metric.WithDescription("Fetch answers read ahead of a partition's cursor and applied by this instance's current copies."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	reread, err := meter.Int64ObservableCounter("kmirror.mirror.reread.bytes", metric.WithUnit("By"),
		metric.WithDescription("Source bytes fetched again by this instance's current copies (read-ahead that started short of the answer before it)."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		perMirror := map[string][2]int64{}
		for _, ref := range c.ownedRefs() {
			if pr, ok := c.cfg.DataPath.Progress(ref); ok {
				m := perMirror[ref.Mirror]
				perMirror[ref.Mirror] = [2]int64{m[0] + pr.ReadAheadAnswers, m[1] + pr.RereadBytes}
			}
		}
		for name, n := range perMirror {
			attrs := metric.WithAttributes(attribute.String("mirror", name))
			o.ObserveInt64(answers, n[0], attrs)
			o.ObserveInt64(reread, n[1], attrs)
		}
		return nil
	}, answers, reread)
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	return nil
}

// registerWorkMetrics publishes how much deciding the partition workers do.
func (c *Coordinator) registerWorkMetrics(meter metric.Meter) error {
	evaluations, err := meter.Int64ObservableCounter("kmirror.coordinator.evaluations",
		metric.WithDescription("State machine decisions this instance's partition workers took: at idle it stays flat; growing with nothing to do means workers are woken for nothing (bench/README.md, \"Scale\")."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	if _, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(evaluations, c.evaluations.Load())
		return nil
	}, evaluations); err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	return nil
}

// registerLossMetrics publishes whether mirror state is lost (stateloss.go)
// and how many state records could not be decoded: both are for alerts.
func (c *Coordinator) registerLossMetrics(meter metric.Meter) error {
	lost, err := meter.Int64ObservableGauge("kmirror.state.lost",
		metric.WithDescription("1 while mirror state is lost (__mirror_state deleted or replaced behind kmirror's back): the lost mirrors' topics stay read-only and are not copied until recovered (kmirror mirrors --recover-state); else 0."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	lostMirrors, err := meter.Int64ObservableGauge("kmirror.state.lost.mirrors",
		metric.WithDescription("Mirrors whose state is lost and not yet recovered."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	undecodable, err := meter.Int64ObservableCounter("kmirror.state.undecodable_records",
		metric.WithDescription("__mirror_state records this instance could not decode (logged at ERROR with partition and offset, never applied)."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		l := c.Loss()
		v := int64(0)
		if l.Lost() {
			v = 1
		}
		o.ObserveInt64(lost, v)
		o.ObserveInt64(lostMirrors, int64(len(l.Mirrors)))
		o.ObserveInt64(undecodable, c.store.Undecodable())
		return nil
	}, lost, lostMirrors, undecodable)
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	return nil
}

// registerSyncMetrics publishes what the mirrors' sync jobs last achieved,
// from the recorded state: every instance reports the same values, and
// they keep growing when no instance runs the jobs, which is what an alert
// on them should catch.
func registerSyncMetrics(meter metric.Meter, store *Store) error {
	groupAge, err := meter.Float64ObservableGauge("kmirror.mirror.group.sync.age", metric.WithUnit("s"),
		metric.WithDescription("Seconds since each consumer group's offsets were last known in sync on the destination (groups never synced are not reported)."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	groups, err := meter.Int64ObservableGauge("kmirror.mirror.groups",
		metric.WithDescription("Consumer groups whose offsets the mirror syncs, by sync state (SYNCED, BEHIND the copy, ACTIVE on the destination, IDLE, FAILED)."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	jobAge, err := meter.Float64ObservableGauge("kmirror.mirror.sync.age", metric.WithUnit("s"),
		metric.WithDescription("Seconds since each sync job (topics, groups, topic-configs, acls) last completed without error."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	jobFailing, err := meter.Int64ObservableGauge("kmirror.mirror.sync.failing",
		metric.WithDescription("1 when a sync job's last run failed (describe shows why), else 0."))
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		now := time.Now()
		store.Read(func(v *statetopic.View) {
			for _, name := range v.MirrorNames() {
				m := v.Mirror(name)
				counts := map[statetopic.GroupSyncState]int64{}
				for g, s := range m.Groups {
					counts[s.State]++
					if t := m.GroupLastSynced(g); !t.IsZero() {
						o.ObserveFloat64(groupAge, max(0, now.Sub(t).Seconds()),
							metric.WithAttributes(attribute.String("mirror", name), attribute.String("group", g)))
					}
				}
				for st, n := range counts {
					o.ObserveInt64(groups, n, metric.WithAttributes(attribute.String("mirror", name), attribute.String("state", string(st))))
				}
				if m.Sync == nil {
					continue
				}
				for job, j := range m.Sync.Jobs {
					// Not "job": Prometheus renames a scraped job label to exported_job.
					attrs := metric.WithAttributes(attribute.String("mirror", name), attribute.String("sync_job", job))
					if !j.LastSuccessAt.IsZero() {
						o.ObserveFloat64(jobAge, max(0, now.Sub(j.LastSuccessAt).Seconds()), attrs)
					}
					failing := int64(0)
					if j.Error != "" {
						failing = 1
					}
					o.ObserveInt64(jobFailing, failing, attrs)
				}
			}
		})
		return nil
	}, groupAge, groups, jobAge, jobFailing)
	if err != nil {
		return fmt.Errorf("coordinator metrics: %w", err)
	}
	return nil
}

// ownedRefs lists the partitions this instance currently drives.
func (c *Coordinator) ownedRefs() []PartitionRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	refs := make([]PartitionRef, 0, len(c.workers))
	for _, w := range c.workers {
		refs = append(refs, w.getRef())
	}
	return refs
}
