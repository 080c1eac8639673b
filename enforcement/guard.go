// Package enforcement keeps mirror topics read-only (docs/ARCHITECTURE.md
// invariant 3): until a mirror partition reaches STOPPED, client writes to it
// through the proxy are refused with POLICY_VIOLATION (or, by option, the
// proposal's READ_ONLY_TOPIC) and a message naming the topic, the mirror and
// the way out. The mirror's own writer talks to the brokers directly and is
// never seen here.
//
// The read-only set is a snapshot swapped atomically whenever __mirror_state
// changes, so the per-request cost is one atomic load and a map lookup per
// partition; while no topic is read-only nothing is decoded at all.
package enforcement

import (
	"context"
	"fmt"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// ReadOnlySet is the snapshot of which topic partitions are read-only.
type ReadOnlySet struct {
	topics map[string]*topicRule
	// loading, when set, says why the set is not known yet (Loading): every topic is
	// refused until the state is read.
	loading string
}

// Loading is the set of an instance that has not yet read __mirror_state to its end: it
// cannot tell a mirror topic from any other, so it refuses every write, Produce with a
// retriable error (clients retry and get through once the state is read, within seconds),
// admin changes with the read-only code and a message saying to retry. An empty set in its
// place let client writes into mirror topics through a restarting instance (the 1,000-fault
// soak, seed 2: seven writes, each displacing a source record).
func Loading(why string) *ReadOnlySet {
	return &ReadOnlySet{topics: map[string]*topicRule{}, loading: why}
}

type topicRule struct {
	mirror    string
	localKeys map[string]bool // topic configs the destination keeps (topic.properties.exclude)
	writable  map[int32]bool  // partitions already STOPPED
	states    map[int32]protocol.MirrorState
	lost      bool // the mirror's state was lost: read-only until recovered
}

// FromView builds the read-only set: every topic of every mirror, with the
// partitions that are STOPPED marked writable.
func FromView(v *statetopic.View) *ReadOnlySet {
	s := &ReadOnlySet{topics: map[string]*topicRule{}}
	for _, name := range v.MirrorNames() {
		m := v.Mirror(name)
		local := mirrorconfig.Parse(m.Config.Configs).TopicPropertyExcluded
		for topic, t := range m.Topics {
			r := &topicRule{mirror: name, writable: map[int32]bool{}, states: map[int32]protocol.MirrorState{},
				localKeys: local}
			all := true
			for p := int32(0); p < t.Partitions; p++ {
				st := m.Partitions[statetopic.PartitionID{SourceTopicID: t.SourceTopicID, Partition: p}]
				if st != nil {
					r.states[p] = st.State
					if st.State == protocol.MirrorStateStopped {
						r.writable[p] = true
						continue
					}
				}
				all = false
			}
			if !all || t.Partitions == 0 {
				s.topics[topic] = r
			}
		}
	}
	return s
}

// WithLost adds the topics of mirrors whose state was lost (topic → mirror):
// they stay read-only, whole, until the mirror is recovered. Topics the view
// already holds keep their rule.
func (s *ReadOnlySet) WithLost(topics map[string]string) *ReadOnlySet {
	for topic, mirror := range topics {
		if _, ok := s.topics[topic]; !ok {
			s.topics[topic] = &topicRule{mirror: mirror, writable: map[int32]bool{}, states: map[int32]protocol.MirrorState{}, lost: true}
		}
	}
	return s
}

// Empty reports whether no topic is read-only.
func (s *ReadOnlySet) Empty() bool { return s == nil || (len(s.topics) == 0 && s.loading == "") }

// IsLoading reports whether the set refuses everything because the state is not read yet.
func (s *ReadOnlySet) IsLoading() bool { return s != nil && s.loading != "" }

// Mirror returns the mirror that keeps topic read-only, or "".
func (s *ReadOnlySet) Mirror(topic string) string {
	if s == nil {
		return ""
	}
	if r := s.topics[topic]; r != nil {
		return r.mirror
	}
	return ""
}

// refusal returns why a write to topic/partition is refused, or "" if it may
// pass. partition -1 asks about the topic as a whole (admin requests).
func (s *ReadOnlySet) refusal(topic string, partition int32) string {
	if s == nil {
		return ""
	}
	if s.loading != "" {
		return fmt.Sprintf("kmirror is reading its mirror state (%s) and cannot yet tell whether topic %q is a read-only mirror topic; retry in a moment",
			s.loading, topic)
	}
	r := s.topics[topic]
	if r == nil {
		return ""
	}
	if partition >= 0 && r.writable[partition] {
		return ""
	}
	if r.lost {
		return fmt.Sprintf("topic %q is a read-only mirror topic of mirror %q, whose state was lost (__mirror_state deleted or replaced); "+
			"it stays read-only until the mirror is recovered: kmirror mirrors --recover-state --mirror %s --config FILE", topic, r.mirror, r.mirror)
	}
	state := "not yet STOPPED"
	if partition >= 0 {
		if st, ok := r.states[partition]; ok {
			state = st.String()
		}
	}
	where := fmt.Sprintf("topic %q", topic)
	if partition >= 0 {
		where = fmt.Sprintf("topic %q partition %d (%s)", topic, partition, state)
	}
	return fmt.Sprintf("%s is a read-only mirror topic of mirror %q; writes are refused until it is failed over: "+
		"kmirror mirrors --remove --mirror %s --topics %s", where, r.mirror, r.mirror, topic)
}

// Options configures a Guard.
type Options struct {
	// ErrorCode refused writes carry: POLICY_VIOLATION (44, default; every
	// client shows the message and does not retry) or READ_ONLY_TOPIC (134).
	ErrorCode int16
	// ResolveTopicID names a topic id (Produce v13+ and other id-addressed
	// requests); typically a Metadata request to the destination.
	ResolveTopicID func(ctx context.Context, id [16]byte) (string, error)
	// IDCacheSize bounds the id→name cache (default 10000).
	IDCacheSize int
}

// Guard decides which client writes may pass.
type Guard struct {
	opts  Options
	set   atomic.Pointer[ReadOnlySet]
	names *lru.Cache[[16]byte, string]
	// internals names kmirror's own resources (internals.go); nil until set.
	internals atomic.Pointer[Internals]
}

// New returns a guard that refuses nothing until Update gives it a set.
func New(opts Options) (*Guard, error) {
	if opts.ErrorCode == 0 {
		opts.ErrorCode = protocol.ErrPolicyViolation.Code
	}
	if opts.ErrorCode != protocol.ErrPolicyViolation.Code && opts.ErrorCode != protocol.ErrReadOnlyTopic.Code {
		return nil, fmt.Errorf("enforcement: error code %d: use %d (POLICY_VIOLATION) or %d (READ_ONLY_TOPIC)",
			opts.ErrorCode, protocol.ErrPolicyViolation.Code, protocol.ErrReadOnlyTopic.Code)
	}
	if opts.IDCacheSize <= 0 {
		opts.IDCacheSize = 10000
	}
	c, err := lru.New[[16]byte, string](opts.IDCacheSize)
	if err != nil {
		return nil, fmt.Errorf("enforcement: id cache: %w", err)
	}
	return &Guard{opts: opts, names: c}, nil
}

// Update installs a new read-only set.
func (g *Guard) Update(s *ReadOnlySet) { g.set.Store(s) }

// Set returns the current read-only set.
func (g *Guard) Set() *ReadOnlySet { return g.set.Load() }

// Active reports whether any topic is read-only; when not, callers skip the
// guard entirely.
func (g *Guard) Active() bool { return !g.set.Load().Empty() }

// LearnTopicID records an id→name pair seen in a Metadata response.
func (g *Guard) LearnTopicID(id [16]byte, name string) {
	if id != ([16]byte{}) && name != "" {
		g.names.Add(id, name)
	}
}

// topicName names a topic addressed by name or id.
func (g *Guard) topicName(ctx context.Context, name string, id [16]byte) (string, error) {
	if name != "" || id == ([16]byte{}) {
		return name, nil
	}
	if n, ok := g.names.Get(id); ok {
		return n, nil
	}
	if g.opts.ResolveTopicID == nil {
		return "", fmt.Errorf("enforcement: topic id %s is unknown and no resolver is set", statetopic.UUID(id))
	}
	n, err := g.opts.ResolveTopicID(ctx, id)
	if err != nil {
		return "", fmt.Errorf("enforcement: resolving topic id %s: %w", statetopic.UUID(id), err)
	}
	g.names.Add(id, n)
	return n, nil
}
