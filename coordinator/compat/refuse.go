package compat

import (
	"context"
	"errors"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/protocol"
)

// Refuse is the check CreateMirror (fresh: a new mirror's clusters are always probed) and
// AddTopicsToMirror (the mirror's cached verdict while younger than the TTL) make: nil when
// the mirror's source (reached through src) can be mirrored into the destination, after
// logging both releases and the mode (a warning, saying how to get exactly-once, when it is
// not); otherwise the error that answers the request. Who may call it is who may send those
// requests: it only reads ApiVersions, which every client may.
func (c *Cache) Refuse(ctx context.Context, log *slog.Logger, mirror string, fresh bool, src *kgo.Client, dst *kadm.Client) error {
	p, err := c.Pair(ctx, mirror, fresh, kadm.NewClient(src), dst)
	var pe *ProbeError
	switch {
	case errors.As(err, &pe) && pe.Side == "source":
		return protocol.ErrCoordinatorNotAvailable.WithMessage("checking the source cluster of mirror %s: %v; retry", mirror, pe.Err)
	case errors.As(err, &pe):
		return protocol.ErrCoordinatorNotAvailable.WithMessage("checking the destination cluster: %v; retry", pe.Err)
	case err != nil:
		return protocol.ErrInvalidConfig.WithMessage("mirror %s: %v", mirror, err)
	}
	attrs := []any{"mirror", mirror, "source_release", p.Source.Release, "destination_release", p.Destination.Release,
		"destination_transaction_version", p.Destination.TransactionVersion, "mode", string(p.Mode)}
	if p.Mode != ModeExactlyOnce {
		log.Warn("destination without transaction.version 2: records keep their offsets, but a zombie instance could add a marker across a take-over; "+
			"on Kafka 4.0+ run `kafka-features --bootstrap-server DEST upgrade --feature transaction.version=2` (docs/versions.md)", attrs...)
		return nil
	}
	log.Info("mirror clusters checked", attrs...)
	return nil
}

// Describe is what DescribeMirrors shows of a mirror's clusters (Pair.String, from the
// mirror's cached verdict while younger than the TTL), or why it is not known; nil if the
// context ended.
func (c *Cache) Describe(ctx context.Context, mirror string, src *kgo.Client, dst *kadm.Client) *string {
	if ctx.Err() != nil {
		return nil
	}
	s := "unknown: "
	if p, err := c.Pair(ctx, mirror, false, kadm.NewClient(src), dst); err != nil {
		s += err.Error()
	} else {
		s = p.String()
	}
	return &s
}

// messageFormatVersion is the one source topic config RefuseTopics reads.
const messageFormatVersion = "message.format.version"

// RefuseTopics refuses the source topics stored in v0/v1 message sets (CheckTopicFormat),
// read from their message.format.version config (absent on Kafka 4.x: nothing to refuse)
// in one DescribeConfigs request for all of them, asking for that config alone. The map
// holds the error of each topic refused, or of every topic when the configs could not be
// read.
func RefuseTopics(ctx context.Context, src *kgo.Client, topics []string) map[string]error {
	refused := map[string]error{}
	if len(topics) == 0 {
		return refused
	}
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, t := range topics {
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName, r.ConfigNames = kmsg.ConfigResourceTypeTopic, t, []string{messageFormatVersion}
		req.Resources = append(req.Resources, r)
	}
	resp, err := req.RequestWith(ctx, src)
	if err != nil {
		for _, t := range topics {
			refused[t] = protocol.ErrCoordinatorNotAvailable.WithMessage("reading the configs of source topic %s: %v; retry", t, err)
		}
		return refused
	}
	for _, r := range resp.Resources {
		if r.ErrorCode != 0 {
			continue // unreadable configs: the copy checks every batch's format anyway
		}
		for _, c := range r.Configs {
			if c.Name != messageFormatVersion || c.Value == nil {
				continue
			}
			if err := CheckTopicFormat(r.ResourceName, *c.Value); err != nil {
				refused[r.ResourceName] = protocol.ErrInvalidRequest.WithMessage("%v", err)
			}
		}
	}
	return refused
}
