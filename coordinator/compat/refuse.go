package compat

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/protocol"
)

// Refuse is the check CreateMirror and AddTopicsToMirror make: nil when the mirror's source
// (reached through src) can be mirrored into the destination, after logging both releases
// and the mode (a warning, saying how to get exactly-once, when it is not); otherwise the
// error that answers the request. Who may call it is who may send those requests: it only
// reads ApiVersions, which every client may.
func Refuse(ctx context.Context, log *slog.Logger, mirror string, src *kgo.Client, dst *kadm.Client) error {
	s, err := Probe(ctx, kadm.NewClient(src))
	if err != nil {
		return protocol.ErrCoordinatorNotAvailable.WithMessage("checking the source cluster of mirror %s: %v; retry", mirror, err)
	}
	d, err := Probe(ctx, dst)
	if err != nil {
		return protocol.ErrCoordinatorNotAvailable.WithMessage("checking the destination cluster: %v; retry", err)
	}
	p, err := Check(s, d)
	if err != nil {
		return protocol.ErrInvalidConfig.WithMessage("mirror %s: %v", mirror, err)
	}
	attrs := []any{"mirror", mirror, "source_release", s.Release, "destination_release", d.Release,
		"destination_transaction_version", d.TransactionVersion, "mode", string(p.Mode)}
	if p.Mode != ModeExactlyOnce {
		log.Warn("destination without transaction.version 2: records keep their offsets, but a zombie instance could add a marker across a take-over; "+
			"on Kafka 4.0+ run `kafka-features --bootstrap-server DEST upgrade --feature transaction.version=2` (docs/versions.md)", attrs...)
		return nil
	}
	log.Info("mirror clusters checked", attrs...)
	return nil
}

// Describe is what DescribeMirrors shows of a mirror's clusters (Pair.String), or why it is
// not known; nil if the context ended.
func Describe(ctx context.Context, src *kgo.Client, dst *kadm.Client) *string {
	if ctx.Err() != nil {
		return nil
	}
	s := "unknown: "
	if p, err := CheckClusters(ctx, kadm.NewClient(src), dst); err != nil {
		s += err.Error()
	} else {
		s = p.String()
	}
	return &s
}

// RefuseTopic refuses a source topic stored in v0/v1 message sets (CheckTopicFormat), read
// from its message.format.version config (absent on Kafka 4.x: nothing to refuse).
func RefuseTopic(ctx context.Context, src *kgo.Client, topic string) error {
	rcs, err := kadm.NewClient(src).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return protocol.ErrCoordinatorNotAvailable.WithMessage("reading the configs of source topic %s: %v; retry", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		return nil // unreadable configs: the copy checks every batch's format anyway
	}
	for _, c := range rc.Configs {
		if c.Key == "message.format.version" && c.Value != nil {
			if err := CheckTopicFormat(topic, *c.Value); err != nil {
				return protocol.ErrInvalidRequest.WithMessage("%v", err)
			}
		}
	}
	return nil
}
