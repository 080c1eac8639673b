// Package compat finds out, before anything is copied, whether a source and a destination
// cluster can be mirrored and how well: what each cluster is (the Apache Kafka release
// guessed from ApiVersions, its finalized transaction.version) and what kmirror needs of
// it. CreateMirror and AddTopicsToMirror ask it, so a pair that cannot work is refused with
// a clear error, and a pair that works with weaker guarantees is named as such
// (docs/versions.md), instead of a partition failing mid-copy.
package compat

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Cluster is what ApiVersions says of a cluster: per API key the highest version every
// broker supports (a cluster in a rolling upgrade is as able as its oldest broker).
type Cluster struct {
	// Release is the Apache Kafka release the oldest broker looks like ("3.6", or
	// "newer than 4.4"/"unknown" as kversion puts it).
	Release string
	// TransactionVersion is the finalized transaction.version feature level (0 when the
	// cluster finalizes none: every release before 4.0, or a 4.x not upgraded to it).
	TransactionVersion int16
	maxVersions        map[int16]int16
}

// FromResponses combines the ApiVersions answers of a cluster's brokers.
func FromResponses(resps []*kmsg.ApiVersionsResponse) Cluster {
	c := Cluster{maxVersions: map[int16]int16{}}
	oldest := int16(-1)
	for i, r := range resps {
		seen := map[int16]bool{}
		for _, k := range r.ApiKeys {
			seen[k.ApiKey] = true
			if v, ok := c.maxVersions[k.ApiKey]; i == 0 || (ok && k.MaxVersion < v) {
				c.maxVersions[k.ApiKey] = k.MaxVersion
			}
		}
		for k := range c.maxVersions {
			if !seen[k] {
				delete(c.maxVersions, k) // a broker without the API: the cluster lacks it
			}
		}
		tv := finalized(r, "transaction.version")
		if i == 0 || tv < c.TransactionVersion {
			c.TransactionVersion = tv
		}
		// The release of the broker with the oldest Produce names the cluster.
		if produce := maxVersion(r, 0); oldest < 0 || produce < oldest {
			oldest = produce
			c.Release = strings.TrimPrefix(kversion.FromApiVersionsResponse(r).VersionGuess(), "v")
		}
	}
	return c
}

func maxVersion(r *kmsg.ApiVersionsResponse, key int16) int16 {
	for _, k := range r.ApiKeys {
		if k.ApiKey == key {
			return k.MaxVersion
		}
	}
	return 0
}

func finalized(r *kmsg.ApiVersionsResponse, feature string) int16 {
	for _, f := range r.FinalizedFeatures {
		if f.Name == feature {
			return f.MaxVersionLevel
		}
	}
	return 0
}

// Probe asks every broker of the cluster behind adm for its API versions.
func Probe(ctx context.Context, adm *kadm.Client) (Cluster, error) {
	vs, err := adm.ApiVersions(ctx)
	if err != nil {
		return Cluster{}, fmt.Errorf("ApiVersions: %w", err)
	}
	var resps []*kmsg.ApiVersionsResponse
	for _, v := range vs.Sorted() {
		if v.Err != nil {
			return Cluster{}, fmt.Errorf("ApiVersions of broker %d: %w", v.NodeID, v.Err)
		}
		resps = append(resps, v.Raw())
	}
	if len(resps) == 0 {
		return Cluster{}, fmt.Errorf("ApiVersions: no broker answered")
	}
	return FromResponses(resps), nil
}

// need is an API a side of the mirror needs, at least at a version, and why.
type need struct {
	key     int16
	version int16
	why     string
}

// sourceNeeds: the copy reads v2 record batches with their aborted transactions (Fetch v4,
// Kafka 0.11), log starts (Fetch v5) and ends by isolation level (ListOffsets v2); the sync
// jobs read topic configs and group offsets.
var sourceNeeds = []need{
	{1, 5, "Fetch v5+ (record batches v2 with log start offsets, Kafka 1.0)"},
	{2, 2, "ListOffsets v2+ (read_committed ends, Kafka 0.11)"},
	{32, 0, "DescribeConfigs (topic configs)"},
	{9, 1, "OffsetFetch (consumer group offsets)"},
}

// destinationNeeds: the copy writes the source's batches as a transactional producer
// (Produce v3+, InitProducerId, AddPartitionsToTxn, EndTxn), adopts open transactions after a
// take-over (DescribeProducers, DescribeTransactions: Kafka 3.0) and aligns log starts
// (DeleteRecords).
var destinationNeeds = []need{
	{0, 3, "Produce v3+ (record batches v2, Kafka 0.11)"},
	{22, 0, "InitProducerId (transactional producers)"},
	{24, 0, "AddPartitionsToTxn"},
	{26, 0, "EndTxn"},
	{21, 0, "DeleteRecords (log start alignment)"},
	{61, 0, "DescribeProducers (take-over of open transactions, Kafka 3.0)"},
	{65, 0, "DescribeTransactions (take-over of open transactions, Kafka 3.0)"},
	{44, 0, "IncrementalAlterConfigs (topic config sync)"},
}

// lacks lists what the cluster lacks of needs.
func (c Cluster) lacks(needs []need) []string {
	var out []string
	for _, n := range needs {
		if v, ok := c.maxVersions[n.key]; !ok || v < n.version {
			out = append(out, n.why)
		}
	}
	return out
}

// Mode is how a pair is mirrored.
type Mode string

const (
	// ModeExactlyOnce: the destination finalizes transaction.version 2 (KIP-890), so every
	// EndTxn bumps the producer epoch and a fenced (zombie) instance cannot add a marker.
	ModeExactlyOnce Mode = "exactly-once"
	// ModeTV1: an older destination transaction protocol. Every record still lands at its
	// source offset, but across a take-over a zombie instance's repeated EndTxn or filler
	// could add a marker between its lease check and its write (docs/versions.md).
	ModeTV1 Mode = "transaction.version 1 (zombie-fencing weaker)"
)

// Pair is the verdict on a source and destination.
type Pair struct {
	Source, Destination Cluster
	Mode                Mode
}

// String is what a log line or describe says: both releases and the mode.
func (p Pair) String() string {
	return fmt.Sprintf("source Kafka %s, destination Kafka %s (transaction.version %d): %s",
		p.Source.Release, p.Destination.Release, p.Destination.TransactionVersion, p.Mode)
}

// Check says whether source can be mirrored into destination and in which mode; the error
// names what is missing, on which side, and what to do.
func Check(source, destination Cluster) (Pair, error) {
	if l := source.lacks(sourceNeeds); len(l) > 0 {
		return Pair{}, fmt.Errorf("the source cluster (Kafka %s) lacks %s: kmirror mirrors from Kafka 1.0 and newer (tested from 2.8; docs/versions.md)",
			source.Release, strings.Join(l, ", "))
	}
	if l := destination.lacks(destinationNeeds); len(l) > 0 {
		return Pair{}, fmt.Errorf("the destination cluster (Kafka %s) lacks %s: kmirror needs a Kafka 3.0+ destination (tested from 3.9; docs/versions.md)",
			destination.Release, strings.Join(l, ", "))
	}
	p := Pair{Source: source, Destination: destination, Mode: ModeExactlyOnce}
	if destination.TransactionVersion < 2 {
		p.Mode = ModeTV1
	}
	return p, nil
}

// CheckClusters probes both clusters and checks the pair; a cluster that does not answer
// is a *ProbeError.
func CheckClusters(ctx context.Context, source, destination *kadm.Client) (Pair, error) {
	s, err := Probe(ctx, source)
	if err != nil {
		return Pair{}, &ProbeError{Side: "source", Err: err}
	}
	d, err := Probe(ctx, destination)
	if err != nil {
		return Pair{}, &ProbeError{Side: "destination", Err: err}
	}
	return Check(s, d)
}

// legacyFormats are the message.format.version values that write v0/v1 message sets
// (before Kafka 0.11), which kmirror does not copy.
var legacyFormats = []string{"0.8", "0.9", "0.10"}

// CheckTopicFormat refuses a source topic whose message.format.version makes its broker store
// v0/v1 message sets (Kafka 2.x/3.x topics converted down for old clients; 4.0 dropped the
// config). kmirror copies v2 record batches byte for byte and cannot keep a v0/v1 set's
// offsets and bytes at the same time.
func CheckTopicFormat(topic, messageFormatVersion string) error {
	if slices.ContainsFunc(legacyFormats, func(p string) bool { return strings.HasPrefix(messageFormatVersion, p) }) {
		return fmt.Errorf("source topic %s has message.format.version=%s (v0/v1 message sets, before Kafka 0.11), which kmirror does not copy: "+
			"set it to 0.11 or newer on the source (kafka-configs --alter --entity-type topics --entity-name %s --add-config message.format.version=2.8) "+
			"and mirror once the older segments have expired, or use MirrorMaker 2 for this topic (docs/versions.md)",
			topic, messageFormatVersion, topic)
	}
	return nil
}
