package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// MarkKey names a marked mirror topic.
type MarkKey struct{ Mirror, Topic string }

// marksTopic reads and writes the marks topic (statetopic.MarksTopicName):
// one record per read-only mirror topic, kept apart from __mirror_state so
// that losing that topic does not lose which destination topics are mirror
// topics. It is tiny (compacted, one partition) and read whole on demand.
type marksTopic struct {
	topic    string
	rf       int16
	opts     []kgo.Opt
	producer *kgo.Client
	admin    *kadm.Client
	log      *slog.Logger
	created  bool // by this instance or seen to exist: no more CreateTopics

	// The marks as of lastEnds: read again only when the topic grew.
	lastEnds  map[int32]int64
	lastMarks map[MarkKey]statetopic.Mark
}

func newMarksTopic(topic string, rf int16, opts []kgo.Opt, log *slog.Logger) (*marksTopic, error) {
	producer, err := kgo.NewClient(append(opts,
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
	)...)
	if err != nil {
		return nil, fmt.Errorf("coordinator: marks producer client: %w", err)
	}
	return &marksTopic{topic: topic, rf: rf, opts: opts, producer: producer, admin: kadm.NewClient(producer), log: log}, nil
}

func (m *marksTopic) close() { m.producer.Close() }

// load reads every mark; a topic that does not exist holds none. A record
// that does not decode is logged and skipped (never applied), like a junk
// state record.
func (m *marksTopic) load(ctx context.Context) (map[MarkKey]statetopic.Mark, error) {
	ends, err := m.admin.ListEndOffsets(ctx, m.topic)
	if err != nil {
		return nil, fmt.Errorf("coordinator: end offsets of %s: %w", m.topic, err)
	}
	want := map[int32]kgo.Offset{}
	last := map[int32]int64{}
	var listErr error
	ends.Each(func(o kadm.ListedOffset) {
		switch {
		case errors.Is(o.Err, kerr.UnknownTopicOrPartition):
		case o.Err != nil:
			listErr = o.Err
		case o.Offset > 0:
			want[o.Partition] = kgo.NewOffset().AtStart()
			last[o.Partition] = o.Offset - 1
		}
	})
	if listErr != nil {
		return nil, fmt.Errorf("coordinator: end offsets of %s: %w", m.topic, listErr)
	}
	if m.lastMarks != nil && maps.Equal(m.lastEnds, last) {
		return maps.Clone(m.lastMarks), nil
	}
	ends0 := maps.Clone(last)
	marks := map[MarkKey]statetopic.Mark{}
	if len(want) == 0 {
		m.lastEnds, m.lastMarks = ends0, marks
		return maps.Clone(marks), nil
	}
	m.created = true
	cl, err := kgo.NewClient(append(m.opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{m.topic: want}),
		kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		return nil, fmt.Errorf("coordinator: marks reader client: %w", err)
	}
	defer cl.Close()
	for len(last) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("coordinator: reading %s: %w", m.topic, ctx.Err())
		}
		var fetchErr error
		fs.EachError(func(_ string, _ int32, err error) { fetchErr = err })
		if fetchErr != nil {
			return nil, fmt.Errorf("coordinator: reading %s: %w", m.topic, fetchErr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := last[r.Partition]; ok && r.Offset >= end {
				delete(last, r.Partition)
			}
			mirror, topic, mk, err := statetopic.DecodeMark(r.Key, r.Value)
			if err != nil {
				m.log.Error("skipping undecodable mark; it is not applied", "topic", m.topic, "partition", r.Partition, "offset", r.Offset, "err", err)
				return
			}
			if mk == nil {
				delete(marks, MarkKey{mirror, topic})
			} else {
				marks[MarkKey{mirror, topic}] = *mk
			}
		})
	}
	m.lastEnds, m.lastMarks = ends0, marks
	return maps.Clone(marks), nil
}

// write appends marks (nil: tombstone), creating the topic on first use.
func (m *marksTopic) write(ctx context.Context, marks map[MarkKey]*statetopic.Mark) error {
	if len(marks) == 0 {
		return nil
	}
	if err := m.ensure(ctx); err != nil {
		return err
	}
	recs := make([]*kgo.Record, 0, len(marks))
	for k, mk := range marks {
		r := &kgo.Record{Key: statetopic.MirrorTopicKey(k.Mirror, k.Topic).Bytes()}
		if mk != nil {
			v, err := statetopic.EncodeMark(mk)
			if err != nil {
				return err
			}
			r.Value = v
		}
		recs = append(recs, r)
	}
	if err := m.producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("coordinator: write %s: %w", m.topic, err)
	}
	return nil
}

func (m *marksTopic) ensure(ctx context.Context) error {
	if m.created {
		return nil
	}
	rf, created, err := createCompactedTopic(ctx, m.admin, m.topic, 1, m.rf)
	if err != nil {
		return err
	}
	if created {
		m.log.Info("created the mirror marks topic", "topic", m.topic, "replication", rf)
	}
	m.created = true
	return nil
}
