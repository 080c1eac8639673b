package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// Store is this instance's copy of __mirror_state: it tails every partition
// of the topic into a View and writes records with read-your-writes, so an
// admin RPC answered after a write on any instance sees that write.
type Store struct {
	topic      string
	partitions int32
	rf         int16
	log        *slog.Logger
	tailOpts   []kgo.Opt
	writeOpts  []kgo.Opt
	adminCl    *kgo.Client
	admin      *kadm.Client
	gone       chan struct{} // cap 1: a fetch said the topic is missing

	mu      sync.RWMutex
	tail    *kgo.Client // replaced when the view restarts on a new state topic
	writer  *kgo.Client // replaced with tail: it would keep the old topic's id
	view    *statetopic.View
	pos     map[int32]int64 // next offset to apply, per state partition
	changed chan struct{}   // closed and replaced after every applied batch and loss change
	gen     uint64          // how many times changed was closed
	bad     int64           // records that could not be decoded (logged, never applied)
	// id is the topic id of the state topic the view was read from (zero
	// until it is first seen). frozen means that topic is gone: the view is
	// its last known state, kept for the read-only set, and nothing more is
	// applied or written (stateloss.go).
	id     statetopic.UUID
	frozen bool
}

// StoreConfig configures a Store.
type StoreConfig struct {
	Topic             string
	Partitions        int32 // used when this instance creates the topic
	ReplicationFactor int16 // clamped to the number of destination brokers
	Client            []kgo.Opt
	Logger            *slog.Logger
}

// OpenStore connects to the destination and starts tailing; it does not
// create the topic (EnsureTopic does, on the first CreateMirror).
func OpenStore(ctx context.Context, cfg StoreConfig) (*Store, error) {
	s := &Store{
		topic: cfg.Topic, partitions: cfg.Partitions, rf: cfg.ReplicationFactor, log: cfg.Logger,
		view: statetopic.NewView(), pos: map[int32]int64{}, changed: make(chan struct{}), gone: make(chan struct{}, 1),
	}
	s.tailOpts = append(append([]kgo.Opt(nil), cfg.Client...),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond),
		// The topic may appear later (first CreateMirror): notice it soon.
		kgo.MetadataMinAge(250*time.Millisecond),
		kgo.MetadataMaxAge(5*time.Second),
	)
	var err error
	s.tail, err = kgo.NewClient(s.tailOpts...)
	if err != nil {
		return nil, fmt.Errorf("coordinator: state tail client: %w", err)
	}
	s.writeOpts = append(append([]kgo.Opt(nil), cfg.Client...),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
	)
	s.writer, err = kgo.NewClient(s.writeOpts...)
	if err != nil {
		s.tail.Close()
		return nil, fmt.Errorf("coordinator: state producer client: %w", err)
	}
	s.adminCl, err = kgo.NewClient(cfg.Client...)
	if err != nil {
		s.tail.Close()
		s.writer.Close()
		return nil, fmt.Errorf("coordinator: state admin client: %w", err)
	}
	s.admin = kadm.NewClient(s.adminCl)
	return s, nil
}

// Run applies tailed records until ctx ends. A record that does not decode
// is logged at ERROR with its partition and offset, counted
// (Undecodable) and skipped: it is never applied, and the records after it
// are.
func (s *Store) Run(ctx context.Context) {
	for {
		s.mu.RLock()
		tail := s.tail
		s.mu.RUnlock()
		fs := tail.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			switch {
			case errors.Is(err, kgo.ErrClientClosed):
				// reset replaced the tail.
			case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
				// Deleted (check at once), or never created yet (nothing
				// to check: the periodic check notices the first one).
				if id, frozen := s.ID(); !id.IsZero() && !frozen {
					select {
					case s.gone <- struct{}{}:
					default:
					}
				}
			default:
				s.log.Warn("reading mirror state", "topic", topic, "partition", p, "err", err)
			}
		})
		s.mu.Lock()
		if s.frozen || tail != s.tail {
			// The state topic is gone or replaced: what this tail still
			// returns is not the state the view was read from.
			s.mu.Unlock()
			continue
		}
		fs.EachRecord(func(r *kgo.Record) {
			if err := s.view.Apply(r.Key, r.Value); err != nil {
				s.bad++
				s.log.Error("skipping undecodable mirror state record (not applied); run `kmirror dump-state` to inspect it",
					"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			}
			s.pos[r.Partition] = r.Offset + 1
		})
		s.notifyLocked()
		s.mu.Unlock()
	}
}

func (s *Store) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
	s.gen++
}

// Generation counts the changes Changed has announced: equal generations
// read the same view.
func (s *Store) Generation() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.gen
}

// Undecodable counts the state records this instance could not decode.
func (s *Store) Undecodable() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.bad
}

// ID is the topic id of the state topic the view was read from (zero
// before it is first seen), and whether that topic is gone (frozen).
func (s *Store) ID() (id statetopic.UUID, frozen bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.id, s.frozen
}

// adopt records the id of the state topic the tail reads, when first seen.
func (s *Store) adopt(id statetopic.UUID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id.IsZero() {
		s.id = id
	}
}

// freeze keeps the view as it is: the state topic it was read from is gone.
func (s *Store) freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen = true
	s.notifyLocked()
}

// reset starts a new, empty view read from the state topic with id: the
// previous one is gone and its view is no longer the state.
func (s *Store) reset(id statetopic.UUID) error {
	tail, err := kgo.NewClient(s.tailOpts...)
	if err != nil {
		return fmt.Errorf("coordinator: state tail client: %w", err)
	}
	writer, err := kgo.NewClient(s.writeOpts...)
	if err != nil {
		tail.Close()
		return fmt.Errorf("coordinator: state producer client: %w", err)
	}
	s.mu.Lock()
	oldTail, oldWriter := s.tail, s.writer
	s.tail, s.writer, s.view, s.pos, s.id, s.frozen = tail, writer, statetopic.NewView(), map[int32]int64{}, id, false
	s.notifyLocked()
	s.mu.Unlock()
	oldTail.Close()
	oldWriter.Close()
	return nil
}

// Gone is signalled when a fetch found the state topic missing.
func (s *Store) Gone() <-chan struct{} { return s.gone }

// Close releases the clients.
func (s *Store) Close() {
	s.mu.RLock()
	tail, writer := s.tail, s.writer
	s.mu.RUnlock()
	tail.Close()
	writer.Close()
	s.adminCl.Close()
}

// Read runs fn with the view under the read lock; fn must not keep pointers
// into the view past its return.
func (s *Store) Read(fn func(v *statetopic.View)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	fn(s.view)
}

// Changed returns a channel closed at the next applied batch.
func (s *Store) Changed() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.changed
}

// EnsureTopic creates the state topic if it does not exist.
func (s *Store) EnsureTopic(ctx context.Context) error {
	rf, created, err := createCompactedTopic(ctx, s.admin, s.topic, s.partitions, s.rf)
	if err != nil {
		return err
	}
	if created {
		s.log.Info("created mirror state topic", "topic", s.topic, "partitions", s.partitions, "replication", rf)
	}
	s.tail.ForceMetadataRefresh()
	// Creation returns before every broker knows the topic: wait until it is
	// listed with leaders, so the first write does not race it.
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		if n, err := s.Partitions(ctx); err == nil && n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("coordinator: %s created but not visible: %w", s.topic, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// Partitions is the state topic's partition count, from the destination.
func (s *Store) Partitions(ctx context.Context) (int32, error) {
	td, err := s.admin.ListTopics(ctx, s.topic)
	if err != nil {
		return 0, fmt.Errorf("coordinator: describe %s: %w", s.topic, err)
	}
	t, ok := td[s.topic]
	if !ok || t.Err != nil || len(t.Partitions) == 0 {
		return 0, ErrNoStateTopic
	}
	for _, p := range t.Partitions {
		if p.Leader < 0 {
			return 0, fmt.Errorf("coordinator: %s partition %d has no leader yet", s.topic, p.Partition)
		}
	}
	return int32(len(t.Partitions)), nil
}

// ErrStateLost refuses writes while the state topic is gone: writing would
// re-create it empty (or write into one someone re-created) and forget
// every mirror in it.
var ErrStateLost = errors.New("the mirror state topic was deleted or replaced behind kmirror's back; nothing is written until the state is recovered (kmirror mirrors --recover-state)")

// ErrNoStateTopic means no mirror was ever created on this destination.
var ErrNoStateTopic = errors.New("the mirror state topic does not exist yet (no mirror was created)")

// Write appends records (a nil value is a tombstone) and returns once this
// instance's view has applied them.
func (s *Store) Write(ctx context.Context, numPartitions int32, recs ...Record) error {
	if _, frozen := s.ID(); frozen {
		return ErrStateLost
	}
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		var value []byte
		if r.Value != nil {
			v, err := statetopic.EncodeValue(r.Value)
			if err != nil {
				return err
			}
			value = v
		}
		krs[i] = &kgo.Record{Key: r.Key.Bytes(), Value: value, Partition: r.Key.StatePartition(numPartitions)}
	}
	s.mu.RLock()
	writer := s.writer
	s.mu.RUnlock()
	if err := writer.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		return fmt.Errorf("coordinator: write mirror state: %w", err)
	}
	want := map[int32]int64{}
	for _, r := range krs {
		want[r.Partition] = max(want[r.Partition], r.Offset+1)
	}
	return s.waitApplied(ctx, want)
}

// Record is one state record to write.
type Record struct {
	Key   statetopic.Key
	Value any // *MirrorConfig, *MirrorTopic, *PartitionState; nil = tombstone
}

// CatchUp returns once the view holds everything written to the state topic
// before the call (on any instance).
func (s *Store) CatchUp(ctx context.Context) error {
	want, err := s.endOffsets(ctx)
	if err != nil {
		return err
	}
	return s.waitApplied(ctx, want)
}

// endOffsets reads the state topic's end offsets: what a view holds everything
// written before the call once it has reached them (reached).
func (s *Store) endOffsets(ctx context.Context) (map[int32]int64, error) {
	ends, err := s.admin.ListEndOffsets(ctx, s.topic)
	if err != nil {
		return nil, fmt.Errorf("coordinator: end offsets of %s: %w", s.topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	return want, nil
}

// reached reports whether the view has applied every partition up to want.
func (s *Store) reached(want map[int32]int64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for p, off := range want {
		if s.pos[p] < off {
			return false
		}
	}
	return true
}

func (s *Store) waitApplied(ctx context.Context, want map[int32]int64) error {
	for {
		changed := s.Changed() // taken before the check: a batch applied after it closes it
		if s.reached(want) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("coordinator: waiting for the mirror state to be read back: %w", ctx.Err())
		}
	}
}

// createCompactedTopic creates one of kmirror's own compacted topics (the
// state topic, the marks topic) unless it exists. The replication factor is
// capped at the destination's broker count so a small test or dev cluster
// works, and min.insync.replicas at 2 so a write survives one broker loss.
// It returns the replication asked for and whether this call created it.
func createCompactedTopic(ctx context.Context, admin *kadm.Client, topic string, partitions int32, maxRF int16) (int16, bool, error) {
	brokers, err := admin.BrokerMetadata(ctx) // ListBrokers would ask for every topic's metadata
	if err != nil {
		return 0, false, fmt.Errorf("coordinator: list destination brokers: %w", err)
	}
	rf := min(maxRF, int16(len(brokers.Brokers)))
	resp, err := admin.CreateTopic(ctx, partitions, rf, map[string]*string{
		"cleanup.policy":      kadm.StringPtr("compact"),
		"min.insync.replicas": kadm.StringPtr(fmt.Sprint(min(2, rf))),
	}, topic)
	if err == nil {
		err = resp.Err
	}
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return rf, false, nil
	}
	if err != nil {
		return rf, false, fmt.Errorf("coordinator: create %s (%d partitions, replication %d): %w", topic, partitions, rf, err)
	}
	return rf, true, nil
}
