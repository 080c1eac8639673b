package instance

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/secrets"
	"github.com/kmirror/kmirror/coordinator/sourceclient"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/fetcher"
	"github.com/kmirror/kmirror/internal/clientid"
	"github.com/kmirror/kmirror/internal/flight"
)

// DataPath is the coordinator's DataPath on top of fetcher: one Copier per
// mirror (its fetch sizes and source connection are the mirror's), shared by
// every partition of that mirror this instance owns.
type DataPath struct {
	sources *sourceclient.Cache
	dst     *kgo.Client
	dstAdm  *kadm.Client
	log     *slog.Logger
	lease   func() error // set once, before the coordinator runs
	acls    *brokerACLs  // DENY ACLs on mirror topics (Config.BrokerACLs); nil: off

	mu      sync.Mutex
	copiers map[string]*mirrorCopier

	flights flight.Group // Prepare's per-mirror and per-topic calls

	// identities takes the partitions' writer identities (InitProducerId). A
	// broker serves one connection's requests one at a time and answers each
	// InitProducerId after a transaction log append, so on one connection the
	// 64 partitions of a new topic took theirs one after another (0.3–1.1 s
	// on the development machine, against 0.14–0.2 s over 8 connections).
	identities []*kgo.Client
}

type mirrorCopier struct {
	copier *fetcher.Copier
	parts  map[coordinator.PartitionRef]bool // running partitions (Config cleared)
}

// NewDataPath copies into the destination reached through dst. identities
// are further clients of the destination that writer identities are taken
// through, spread by transactional id (dst when there are none); the DataPath
// owns and closes them.
func NewDataPath(sources *sourceclient.Cache, dst *kgo.Client, identities []*kgo.Client, log *slog.Logger) *DataPath {
	return &DataPath{sources: sources, dst: dst, dstAdm: kadm.NewClient(dst), identities: identities, log: log, copiers: map[string]*mirrorCopier{}}
}

// identityClient is the client that takes the writer identity named key.
func (d *DataPath) identityClient(key string) *kgo.Client {
	if len(d.identities) == 0 {
		return d.dst
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return d.identities[h.Sum32()%uint32(len(d.identities))]
}

// sourceClientError marks a source client that cannot be built as
// permanent (the configs are wrong), except for a secret that does not
// resolve on this instance: the partition is FAILED with that message and
// retried with the mirror's backoff, so it copies again by itself once the
// file, variable or key is in place.
func sourceClientError(err error) error {
	var se *secrets.Error
	if errors.As(err, &se) {
		return err
	}
	return datapath.Permanent(err)
}

func key(p coordinator.PartitionRef) coordinator.PartitionRef {
	p.Config = nil
	return p
}

// SetLease makes every write of the copy ask lease first (the
// coordinator's ownership lease).
func (d *DataPath) SetLease(lease func() error) { d.lease = lease }

// Prepare checks the source is still the cluster the mirror was created
// for, makes the destination topic ready, fences in this instance as the
// writer of the partition's state and keeps (or, the first time, takes) the
// partition's data writer. Alignment with the source log start happens in
// Start.
func (d *DataPath) Prepare(ctx context.Context, p coordinator.PartitionRef, data *datapath.Producer) (coordinator.Writer, []string, error) {
	src, err := d.sources.Client(p.Mirror, p.Config.Configs)
	if err != nil {
		return coordinator.Writer{}, nil, sourceClientError(err)
	}
	if want := p.Config.SourceClusterID; want != "" {
		got, err := flight.Do(ctx, &d.flights, "cluster-id/"+p.Mirror, time.Minute, func(ctx context.Context) (string, error) {
			return sourceclient.ClusterID(ctx, src)
		})
		if err != nil {
			return coordinator.Writer{}, nil, fmt.Errorf("reaching the source cluster: %w", err)
		}
		if got != want {
			return coordinator.Writer{}, nil, datapath.Permanent(fmt.Errorf(
				"the source at %s is cluster %s, but the mirror was created for cluster %s; fix bootstrap.servers (delete and re-create the mirror)",
				p.Config.Configs["bootstrap.servers"], got, want))
		}
	}
	excluded := mirrorconfig.Parse(p.Config.Configs).TopicPropertyExcluded
	// The partitions of a topic prepare together: one of them creates or checks the
	// destination topic for all that ask at the same moment.
	if _, err := flight.Do(ctx, &d.flights, "topic/"+p.Mirror+"/"+p.Topic, 2*time.Minute, func(ctx context.Context) (fetcher.DestinationTopic, error) {
		return fetcher.EnsureDestinationTopic(ctx, kadm.NewClient(src), d.dstAdm, p.Topic, func(name string) bool {
			return excluded[name] || mirrorconfig.DefaultExcludedConfig(name)
		})
	}); err != nil {
		return coordinator.Writer{}, nil, fmt.Errorf("preparing destination topic %s: %w", p.Topic, err)
	}
	if d.acls != nil {
		// Before the partition is MIRRORING: from then on no client may write to it.
		if _, err := flight.Do(ctx, &d.flights, "deny/"+p.Topic, time.Minute, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, d.acls.deny(ctx, p.Topic)
		}); err != nil {
			return coordinator.Writer{}, nil, err
		}
	}
	id, err := fetcher.InitProducer(ctx, d.identityClient(p.TransactionalID()), p.TransactionalID())
	if err != nil {
		return coordinator.Writer{}, nil, err
	}
	if data == nil {
		w, err := fetcher.NewWriter(ctx, d.identityClient(p.TransactionalID()+"/data"))
		if err != nil {
			return coordinator.Writer{}, nil, fmt.Errorf("taking the partition's data writer: %w", err)
		}
		data = &w
	}
	return coordinator.Writer{ProducerID: id.ID, Epoch: id.Epoch, Data: data}, nil, nil
}

func (d *DataPath) copierFor(p coordinator.PartitionRef) (*mirrorCopier, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if mc := d.copiers[p.Mirror]; mc != nil {
		return mc, nil
	}
	src, err := d.sources.Client(p.Mirror, p.Config.Configs)
	if err != nil {
		return nil, sourceClientError(err)
	}
	cfg := mirrorconfig.Parse(p.Config.Configs)
	c, err := fetcher.NewCopier(fetcher.Config{Source: src, Destination: d.dst, WriterClientID: clientid.Writer(p.Mirror), FetchMaxBytes: cfg.FetchMaxBytes,
		FetchResponseMaxBytes: cfg.FetchResponseMaxBytes, FetchMaxWait: cfg.FetchMaxWait, FetchesInFlight: cfg.FetchMaxInFlight, RateLimit: cfg.ThrottledRate,
		MaxBufferedBytes: max(cfg.BufferMaxBytes, int64(cfg.FetchMaxBytes)),
		Lease:            d.lease, Logger: d.log.With("mirror", p.Mirror)})
	if err != nil {
		return nil, err
	}
	mc := &mirrorCopier{copier: c, parts: map[coordinator.PartitionRef]bool{}}
	d.copiers[p.Mirror] = mc
	return mc, nil
}

// Start copies the partition with the writer Prepare fenced in.
func (d *DataPath) Start(ctx context.Context, p coordinator.PartitionRef, w coordinator.Writer, events func(datapath.Event)) error {
	mc, err := d.copierFor(p)
	if err != nil {
		return err
	}
	if w.Data == nil {
		return errors.New("internal: starting a copy without the partition's data writer")
	}
	task := fetcher.Task{Topic: p.Topic, Partition: p.Partition, SourceTopicID: p.SourceTopicID, TransactionalID: p.TransactionalID(),
		Writer: w.Data}
	if err := mc.copier.Start(ctx, task, events); err != nil {
		return err
	}
	d.mu.Lock()
	mc.parts[key(p)] = true
	d.mu.Unlock()
	return nil
}

// Stop stops the partition's copy and returns the last mirrored offset: the
// destination log end (before the abort markers of a failover). A copy that
// runs here stops as how says; one that does not (it failed) still gets its
// open destination transactions aborted on failover. A failover then lifts
// the brokers' DENY ACLs on the topic (brokeracls.go), before the
// coordinator records the partition STOPPED.
func (d *DataPath) Stop(ctx context.Context, p coordinator.PartitionRef, how datapath.StopHow) (int64, error) {
	end, err := d.stop(ctx, p, how)
	if err != nil || how != datapath.StopFailover || d.acls == nil {
		return end, err
	}
	if _, err := flight.Do(ctx, &d.flights, "allow/"+p.Topic, time.Minute, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, d.acls.allow(ctx, p.Topic)
	}); err != nil {
		return 0, err
	}
	return end, nil
}

func (d *DataPath) stop(ctx context.Context, p coordinator.PartitionRef, how datapath.StopHow) (int64, error) {
	if pr, ran := d.stopCopy(p, how); ran && (how != datapath.StopFailover || pr.OpenTransactions == 0) {
		if pr.AbortedAtFailover > 0 {
			d.log.Info("failover aborted destination transactions whose source markers were not copied yet", "mirror", p.Mirror,
				"topic", p.Topic, "partition", p.Partition, "aborted", pr.AbortedAtFailover, "last_mirrored_offset", pr.DestinationLogEnd)
		}
		return pr.DestinationLogEnd, nil
	}
	if how == datapath.StopFailover {
		end, aborted, err := fetcher.Failover(ctx, d.dst, p.Topic, p.Partition, p.TransactionalID(), d.log.With("mirror", p.Mirror))
		if err != nil {
			return 0, fmt.Errorf("failing over %s/%d: %w", p.Topic, p.Partition, err)
		}
		if aborted > 0 {
			d.log.Info("failover aborted destination transactions left open", "mirror", p.Mirror, "topic", p.Topic, "partition", p.Partition, "aborted", aborted)
		}
		return end, nil
	}
	ends, err := d.dstAdm.ListEndOffsets(ctx, p.Topic)
	if err != nil {
		return 0, fmt.Errorf("reading the destination log end of %s/%d: %w", p.Topic, p.Partition, err)
	}
	o, ok := ends.Lookup(p.Topic, p.Partition)
	if !ok {
		return 0, nil // the destination topic was never created: nothing mirrored
	}
	if o.Err != nil {
		return 0, fmt.Errorf("reading the destination log end of %s/%d: %w", p.Topic, p.Partition, o.Err)
	}
	return o.Offset, nil
}

// stopCopy stops the partition's copy if it runs here, and reports its final
// progress.
func (d *DataPath) stopCopy(p coordinator.PartitionRef, how datapath.StopHow) (datapath.Progress, bool) {
	d.mu.Lock()
	mc := d.copiers[p.Mirror]
	running := mc != nil && mc.parts[key(p)]
	if running {
		delete(mc.parts, key(p))
	}
	d.mu.Unlock()
	if !running {
		return datapath.Progress{}, false
	}
	pr, err := mc.copier.StopWith(p.Topic, p.Partition, how)
	if err != nil {
		d.log.Debug("copy ended with an error", "mirror", p.Mirror, "topic", p.Topic, "partition", p.Partition, "err", err)
	}
	d.mu.Lock()
	idle := len(mc.parts) == 0 && d.copiers[p.Mirror] == mc
	if idle {
		delete(d.copiers, p.Mirror)
	}
	d.mu.Unlock()
	if idle {
		mc.copier.Close()
	}
	return pr, err == nil
}

// ConfigureMirror applies a mirror's configs that can change while its
// copy runs (the byte-rate limit).
func (d *DataPath) ConfigureMirror(name string, cfg *statetopic.MirrorConfig) {
	d.mu.Lock()
	mc := d.copiers[name]
	d.mu.Unlock()
	if mc != nil && cfg != nil {
		mc.copier.SetRateLimit(mirrorconfig.Number(cfg.Configs, "replication.throttled.rate"))
	}
}

// Progress reports a partition this instance copies.
func (d *DataPath) Progress(p coordinator.PartitionRef) (datapath.Progress, bool) {
	d.mu.Lock()
	mc := d.copiers[p.Mirror]
	d.mu.Unlock()
	if mc == nil {
		return datapath.Progress{}, false
	}
	return mc.copier.Progress(p.Topic, p.Partition)
}

// Forget stops a partition this instance no longer owns.
func (d *DataPath) Forget(p coordinator.PartitionRef) { d.stopCopy(p, datapath.StopHandover) }

// Close stops every copy.
func (d *DataPath) Close() {
	d.mu.Lock()
	copiers := d.copiers
	d.copiers = map[string]*mirrorCopier{}
	d.mu.Unlock()
	for _, mc := range copiers {
		mc.copier.Close()
	}
	for _, cl := range d.identities {
		cl.Close()
	}
}
