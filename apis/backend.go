package apis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/compat"
	"github.com/kmirror/kmirror/coordinator/sourceclient"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
	"github.com/kmirror/kmirror/proxy"
)

// Backend is what the handlers act on: this instance's coordinator, the
// source clients and the destination admin. Each mirror RPC is a method of
// it, in the file of its API key.
type Backend struct {
	Coord       *coordinator.Coordinator
	Sources     *sourceclient.Cache
	Destination *kadm.Client // the destination cluster, reached directly
	Log         *slog.Logger
	Now         func() time.Time
	// Routes lists the routes this instance serves (SwitchRoute refuses
	// others; DescribeMirrors shows them); nil: none.
	Routes func() []proxy.RouteStatus

	// compat keeps each mirror's cluster verdict (ApiVersions of every broker of both
	// clusters) for a minute: AddTopicsToMirror and DescribeMirrors reuse it, CreateMirror
	// renews it.
	compat compat.Cache
}

// rpcTimeout bounds one RPC's work against the clusters.
const rpcTimeout = 30 * time.Second

var mirrorNameRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,200}$`)

// checkMirrorName validates a mirror name: it becomes part of transactional
// ids and metric labels, so it is limited like a Kafka topic name.
func checkMirrorName(name string) error {
	if !mirrorNameRE.MatchString(name) || name == "." || name == ".." {
		return protocol.ErrInvalidRequest.WithMessage(
			"invalid mirror name %q: use 1 to 200 characters from a-z, A-Z, 0-9, '.', '_' and '-'", name)
	}
	return nil
}

// catchUp makes the view include every state write made before the call, on
// any instance. Without a state topic there is nothing to catch up with.
// While the state topic is gone (deleted behind kmirror's back) it answers
// the state loss: the view is only the last known state.
func (b *Backend) catchUp(ctx context.Context) error {
	if l := b.Coord.Loss(); l.Frozen {
		return l.Error("")
	}
	if _, err := b.Coord.StatePartitions(ctx); errors.Is(err, coordinator.ErrNoStateTopic) {
		return nil
	} else if err != nil {
		return protocol.ErrCoordinatorNotAvailable.WithMessage("mirror state is not readable: %v; retry shortly", err)
	}
	if err := b.Coord.Store().CatchUp(ctx); err != nil {
		return protocol.ErrCoordinatorNotAvailable.WithMessage("mirror state is not readable: %v; retry shortly", err)
	}
	return nil
}

// Mirror returns a copy of a mirror's state after catching up, or
// UNKNOWN_MIRROR.
func (b *Backend) Mirror(ctx context.Context, name string) (*statetopic.Mirror, error) {
	if err := checkMirrorName(name); err != nil {
		return nil, err
	}
	if err := b.catchUp(ctx); err != nil {
		return nil, err
	}
	if l := b.Coord.Loss(); l.Mirrors[name] != nil {
		return nil, l.Error(name)
	}
	var m *statetopic.Mirror
	b.Coord.Store().Read(func(v *statetopic.View) { m = v.Mirror(name).Copy() })
	if m == nil {
		return nil, protocol.ErrUnknownMirror.WithMessage("mirror %q does not exist; `kmirror mirrors --list` shows the mirrors", name)
	}
	return m, nil
}

// sourceClient returns the mirror's source client.
func (b *Backend) sourceClient(m *statetopic.Mirror) (*kgo.Client, error) {
	cl, err := b.Sources.Client(m.Name, m.Config.Configs)
	if err != nil {
		return nil, protocol.ErrInvalidConfig.WithMessage("%v", err)
	}
	return cl, nil
}

// setDesire writes the desired state of mirror topics.
func (b *Backend) setDesire(ctx context.Context, m *statetopic.Mirror, topics []string, d statetopic.TopicDesire) error {
	recs := make([]coordinator.Record, 0, len(topics))
	for _, name := range topics {
		t := *m.Topics[name]
		t.Desired, t.UpdatedAt = d, b.now()
		recs = append(recs, coordinator.Record{Key: statetopic.MirrorTopicKey(m.Name, name), Value: &t})
	}
	if len(recs) == 0 {
		return nil
	}
	if err := b.Coord.Write(ctx, recs...); err != nil {
		return fmt.Errorf("recording the new desired state: %w", err)
	}
	return nil
}

// now is the backend's clock (Now, else the system's).
func (b *Backend) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

// checkPatterns checks that each topic pattern is a regular expression.
func checkPatterns(lists ...[]string) error {
	for _, list := range lists {
		for _, p := range list {
			if _, err := regexp.Compile("^(?:" + p + ")$"); err != nil {
				return protocol.ErrInvalidRequest.WithMessage("invalid topic pattern %q: %v", p, err)
			}
		}
	}
	return nil
}

// topicResults is a per-topic response's topics and top-level error.
func topicResults(results []protocol.TopicResult, err error) ([]protocol.TopicResult, int16, *string) {
	code, msg := protocol.ErrorCodeAndMessage(err)
	return results, code, msg
}

// topicResult builds a per-topic result from an error (nil = success).
func topicResult(name string, err error) protocol.TopicResult {
	code, msg := protocol.ErrorCodeAndMessage(err)
	return protocol.TopicResult{Name: name, ErrorCode: code, ErrorMessage: msg}
}

// answerRequested answers the partitions a LastMirroredOffsets or
// ReadMirrorState request names (requested): each with part, then each
// topic with topic.
func answerRequested[P any](ctx context.Context, b *Backend, mirror string, topics []protocol.TopicPartitions,
	part func(requestedPartition) P, topic func(name string, parts []P)) error {
	m, err := b.Mirror(ctx, mirror)
	if err != nil {
		return err
	}
	requested(m, topics, func(name string, parts []requestedPartition) {
		var out []P
		for _, rp := range parts {
			out = append(out, part(rp))
		}
		topic(name, out)
	})
	return nil
}

// requestedPartition is one partition a request names, with its state (nil
// where none is recorded) or the error that answers it.
type requestedPartition struct {
	Partition int32
	State     *statetopic.PartitionState
	Err       error
}

// requested expands the topics and partitions a LastMirroredOffsets or
// ReadMirrorState request names: no topics means every topic of the mirror,
// no partitions every partition of the topic.
func requested(m *statetopic.Mirror, topics []protocol.TopicPartitions, each func(topic string, parts []requestedPartition)) {
	if len(topics) == 0 {
		for _, n := range m.TopicNames() {
			topics = append(topics, protocol.TopicPartitions{Name: n})
		}
	}
	for _, tp := range topics {
		states := m.TopicStates(tp.Name)
		parts := tp.Partitions
		if len(parts) == 0 {
			for p := range states {
				parts = append(parts, int32(p))
			}
		}
		out := make([]requestedPartition, 0, len(parts))
		for _, p := range parts {
			rp := requestedPartition{Partition: p}
			switch {
			case states == nil:
				rp.Err = protocol.ErrTopicNotInMirror.WithMessage("topic %q is not in mirror %q", tp.Name, m.Name)
			case p < 0 || int(p) >= len(states):
				rp.Err = protocol.ErrUnknownTopicOrPartition.WithMessage("topic %q has %d partitions", tp.Name, len(states))
			default:
				rp.State = states[p]
			}
			out = append(out, rp)
		}
		each(tp.Name, out)
	}
}
