package apis

import (
	"context"
	"errors"
	"maps"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/sourceclient"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// CreateMirror (key 1000) validates the name and configs, reaches the
// source cluster to learn (or check) its cluster id, creates __mirror_state
// on first use and records the mirror's config, with its secrets encrypted
// or as the config provider references given. With RecoverState it rebuilds
// a mirror whose state was lost instead (1000_recover_state.go).
func (b *Backend) CreateMirror(ctx context.Context, req *protocol.CreateMirrorRequest) *protocol.CreateMirrorResponse {
	resp := protocol.NewPtrCreateMirrorResponse()
	resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(b.createMirror(ctx, req))
	return resp
}

func (b *Backend) createMirror(ctx context.Context, req *protocol.CreateMirrorRequest) error {
	if err := checkMirrorName(req.MirrorName); err != nil {
		return err
	}
	configs := map[string]string{}
	for _, c := range req.Configs {
		if _, dup := configs[c.Name]; dup {
			return protocol.ErrInvalidConfig.WithMessage("mirror config %s is given twice", c.Name)
		}
		if c.Value == nil {
			return protocol.ErrInvalidConfig.WithMessage("mirror config %s has no value", c.Name)
		}
		configs[c.Name] = *c.Value
	}
	if err := mirrorconfig.Validate(configs); err != nil {
		return protocol.ErrInvalidConfig.WithMessage("%v", err)
	}
	// What is stored: secrets encrypted or as the references given, never in clear.
	stored, err := b.Sources.Secrets().SealNew(req.MirrorName, configs)
	if err != nil {
		return protocol.ErrInvalidConfig.WithMessage("%v", err)
	}
	// What this instance connects with, to check the source now.
	resolved, err := b.Sources.Secrets().Resolve(req.MirrorName, stored)
	if err != nil {
		return protocol.ErrInvalidConfig.WithMessage("%v; every instance must resolve it (the one that answered this request cannot)", err)
	}
	if req.RecoverState {
		return b.recoverState(ctx, req.MirrorName, configs, stored, resolved)
	}
	if err := b.catchUp(ctx); err != nil {
		return err
	}
	if b.Coord.Loss().Mirrors[req.MirrorName] != nil {
		return protocol.ErrMirrorAlreadyExists.WithMessage("mirror %q exists, but its state was lost: recover it with `kmirror mirrors --recover-state --mirror %s --config FILE`, or choose another name",
			req.MirrorName, req.MirrorName)
	}
	var existing *statetopic.Mirror
	exists := false
	b.Coord.Store().Read(func(v *statetopic.View) {
		exists, existing = v.RawMirror(req.MirrorName) != nil, v.Mirror(req.MirrorName)
	})
	if exists {
		if b.sameMirror(req.MirrorName, existing, resolved) {
			// A client that timed out waiting for this answer sends the request again (kgo
			// does, on a new connection): the mirror it asked for exists, so the retry succeeds.
			b.Log.Info("CreateMirror repeated with the configs the mirror was created with: nothing to do", "mirror", req.MirrorName)
			return nil
		}
		return protocol.ErrMirrorAlreadyExists.WithMessage("mirror %q already exists with other configs (or is still being deleted); describe it, or choose another name", req.MirrorName)
	}

	// One connection to the source answers both checks: its cluster id and its release.
	src, clusterID, err := checkedSource(ctx, configs, resolved)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := b.compat.Refuse(ctx, b.Log, req.MirrorName, true, src, b.Destination); err != nil {
		return err
	}
	if err := b.Coord.EnsureStateTopic(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return protocol.ErrCoordinatorNotAvailable.WithMessage("creating %s timed out; retry", statetopic.TopicName)
		}
		return protocol.ErrCoordinatorNotAvailable.WithMessage("cannot create the mirror state topic: %v", err)
	}
	rec := &statetopic.MirrorConfig{Configs: stored, CreatedAt: b.now(), SourceClusterID: clusterID}
	if err := b.Coord.Write(ctx, coordinator.Record{Key: statetopic.MirrorConfigKey(req.MirrorName), Value: rec}); err != nil {
		return protocol.ErrCoordinatorNotAvailable.WithMessage("recording the mirror: %v; retry", err)
	}
	b.Log.Info("mirror created", "mirror", req.MirrorName, "source", configs["bootstrap.servers"], "source_cluster_id", clusterID)
	return nil
}

// sameMirror tells whether the recorded mirror m (nil while it is being
// deleted) was created with exactly the configs resolved: what a repeated
// CreateMirror would create. Secrets are compared as this instance resolves
// them, since each seal of a secret differs.
func (b *Backend) sameMirror(name string, m *statetopic.Mirror, resolved map[string]string) bool {
	if m == nil {
		return false
	}
	had, err := b.Sources.Secrets().Resolve(name, m.Config.Configs)
	return err == nil && maps.Equal(had, resolved)
}

// checkedSource is a client of the source the configs describe (resolved:
// what this instance connects with) and its cluster id, checked by
// checkedClusterID; the caller closes the client.
func checkedSource(ctx context.Context, configs, resolved map[string]string) (*kgo.Client, string, error) {
	src, err := oneOffSourceClient(resolved)
	if err != nil {
		return nil, "", err
	}
	clusterID, err := checkedClusterID(ctx, src, configs)
	if err != nil {
		src.Close()
		return nil, "", err
	}
	return src, clusterID, nil
}

// checkedClusterID is the cluster id of the source reached through src,
// which must be the source.cluster.id the operator gave, if any. A source
// that cannot be reached is refused now rather than failing later.
func checkedClusterID(ctx context.Context, src *kgo.Client, configs map[string]string) (string, error) {
	clusterID, err := sourceclient.ClusterID(ctx, src)
	if err != nil {
		return "", protocol.ErrInvalidConfig.WithMessage("cannot reach the source cluster at %s: %v; check bootstrap.servers and the security configs",
			configs["bootstrap.servers"], err)
	}
	if want := configs["source.cluster.id"]; want != "" && want != clusterID {
		return "", protocol.ErrInvalidConfig.WithMessage("source.cluster.id is %s but the cluster at %s reports %s; fix bootstrap.servers or source.cluster.id",
			want, configs["bootstrap.servers"], clusterID)
	}
	return clusterID, nil
}

// oneOffSourceClient is a client of the source the configs (resolved)
// describe, for a mirror not recorded yet; the caller closes it.
func oneOffSourceClient(configs map[string]string) (*kgo.Client, error) {
	opts, err := sourceclient.Options(mirrorconfig.Parse(configs))
	if err != nil {
		return nil, protocol.ErrInvalidConfig.WithMessage("%v", err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, protocol.ErrInvalidConfig.WithMessage("source client: %v", err)
	}
	return cl, nil
}
