package fetcher

import (
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/datapath"
)

// Config configures a Copier.
type Config struct {
	Source      *kgo.Client
	Destination *kgo.Client
	// WriterClientID, if set, is the client id of the copy's destination
	// writes (Produce and transaction control): destination quotas can
	// then single out one mirror's writes (internal/clientid).
	WriterClientID string
	// FetchMaxBytes is the per-partition fetch size (default 1 MiB); partitions that share
	// a leader with few others fetch more (partitionFetchBytes).
	FetchMaxBytes int32
	// FetchResponseMaxBytes bounds one Fetch response (default ResponseBytes: the
	// buffer shared by the Fetches in flight, 16 MiB for the defaults).
	FetchResponseMaxBytes int32
	// FetchMaxWait is how long a broker may hold a Fetch (default 500 ms).
	FetchMaxWait time.Duration
	// FetchesInFlight is how many Fetch requests may be in flight to one
	// source broker at once, each for a disjoint share of its partitions
	// and each over a connection of its own (default 8): enough bytes in
	// flight to fill a long link, still bounded by MaxBufferedBytes
	// (source.go). The copier clones Source for the extra connections.
	FetchesInFlight int
	// MaxBufferedBytes bounds fetched-but-unwritten bytes over all
	// partitions (default 128 MiB). A broker may return one batch larger than
	// the fetch limits (to make progress), so the bound can be exceeded by at
	// most one destination max.message.bytes per source broker.
	MaxBufferedBytes int64
	// ProduceTimeout is the destination's acks=all wait (default 30 s).
	ProduceTimeout time.Duration
	// RateLimit bounds the source bytes copied per second over all
	// partitions (0: unlimited); SetRateLimit changes it at runtime.
	RateLimit int64
	// FillerTransactions is how many empty aborted transactions may be in
	// flight at once per partition to fill offsets the source has no record
	// at (default 32).
	FillerTransactions int
	// Lease, if set, is asked before every write to the destination; an
	// error holds the write back (the caller may have lost the partition).
	Lease  func() error
	Logger *slog.Logger

	hooks hooks // tests only (hooks.go); nil: noHooks
}

// withDefaults fills in what cfg leaves unset (zero).
func (cfg Config) withDefaults() Config {
	if cfg.FetchMaxBytes <= 0 {
		cfg.FetchMaxBytes = 1 << 20
	}
	if cfg.FetchMaxWait <= 0 {
		cfg.FetchMaxWait = 500 * time.Millisecond
	}
	if cfg.FetchesInFlight <= 0 {
		cfg.FetchesInFlight = 8
	}
	if cfg.MaxBufferedBytes <= 0 {
		cfg.MaxBufferedBytes = 128 << 20
	}
	if cfg.FetchResponseMaxBytes <= 0 {
		cfg.FetchResponseMaxBytes = ResponseBytes(cfg.FetchMaxBytes, cfg.MaxBufferedBytes, cfg.FetchesInFlight)
	}
	if cfg.ProduceTimeout <= 0 {
		cfg.ProduceTimeout = 30 * time.Second
	}
	if cfg.FillerTransactions <= 0 {
		cfg.FillerTransactions = 32
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.hooks == nil {
		cfg.hooks = noHooks{}
	}
	return cfg
}

// Task names one mirror partition to copy.
type Task struct {
	Topic     string
	Partition int32
	// SourceTopicID is the source topic id the mirror recorded; a different
	// id on the source means the topic was deleted and re-created. Zero:
	// learn it at Start (see Progress.SourceTopicID).
	SourceTopicID [16]byte
	// TransactionalID prefixes the partition's destination transactional ids
	// (txn.go); every owner of the partition must use the same one.
	TransactionalID string
	// Writer is the partition's idempotent writer (NewWriter), the same for
	// every owner of the partition. Nil: Start takes a new one (tests).
	// (Producer id 0 is a valid id: the first a cluster hands out.)
	Writer *datapath.Producer
}
