// Package apis answers the mirror RPCs (API keys 1000..1011) and the mirror
// config resources of DescribeConfigs and IncrementalAlterConfigs. Register
// connects them to the proxy, which never forwards these to a broker.
//
// One file per API key, named by key number as kfake and proxy/ do
// (1000_create_mirror.go, 1003_last_mirrored_offsets.go,
// 1006_read_mirror_state.go, ...), each opening with what the RPC does; the
// handler is the Backend method named after the RPC. What several RPCs
// share (the Backend, lookups that catch up with __mirror_state first, the
// expansion of requested partitions) is in backend.go. The mirror's topics
// job (topicsjob.go) adds topics the way AddTopicsToMirror does; the
// scheduler that runs it with the other sync jobs is coordinator/syncjobs.
package apis

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/protocol"
	"github.com/kmirror/kmirror/proxy"
)

// Register installs every mirror RPC handler.
func Register(h *proxy.Handlers, b *Backend) {
	h.Register(protocol.KeyCreateMirror, handler(b, (*Backend).CreateMirror))
	h.Register(protocol.KeyAddTopicsToMirror, handler(b, (*Backend).AddTopicsToMirror))
	h.Register(protocol.KeyRemoveTopicsFromMirror, handler(b, (*Backend).RemoveTopicsFromMirror))
	h.Register(protocol.KeyLastMirroredOffsets, handler(b, (*Backend).LastMirroredOffsets))
	h.Register(protocol.KeyListMirrors, handler(b, (*Backend).ListMirrors))
	h.Register(protocol.KeyDescribeMirrors, handler(b, (*Backend).DescribeMirrors))
	h.Register(protocol.KeyReadMirrorState, handler(b, (*Backend).ReadMirrorState))
	h.Register(protocol.KeyWriteMirrorState, writeMirrorState)
	h.Register(protocol.KeyPauseMirrorTopics, handler(b, (*Backend).PauseMirrorTopics))
	h.Register(protocol.KeyResumeMirrorTopics, handler(b, (*Backend).ResumeMirrorTopics))
	h.Register(protocol.KeyDeleteMirror, handler(b, (*Backend).DeleteMirror))
	h.Register(protocol.KeySwitchRoute, handler(b, (*Backend).SwitchRoute))
}

// ConfigResources answers DescribeConfigs and IncrementalAlterConfigs that
// name mirror config resources (32_44_mirror_configs.go); the proxy forwards
// every other such request to the brokers.
func ConfigResources(b *Backend) proxy.ConfigResourceHandler {
	return func(key, version int16, body []byte) (func(context.Context) kmsg.Response, bool) {
		switch key {
		case 44:
			req := kmsg.NewPtrIncrementalAlterConfigsRequest()
			req.SetVersion(version)
			if req.ReadFrom(body) != nil || !namesMirrorResources(alterTypes(req)) {
				return nil, false // undecodable requests are the broker's to refuse
			}
			return bounded(func(ctx context.Context) kmsg.Response { return b.AlterMirrorConfigs(ctx, req) }), true
		case 32:
			req := kmsg.NewPtrDescribeConfigsRequest()
			req.SetVersion(version)
			if req.ReadFrom(body) != nil || !namesMirrorResources(describeTypes(req)) {
				return nil, false
			}
			return bounded(func(ctx context.Context) kmsg.Response { return b.DescribeMirrorConfigs(ctx, req) }), true
		}
		return nil, false
	}
}

// bounded runs answer with a context bounded by rpcTimeout.
func bounded(answer func(context.Context) kmsg.Response) func(context.Context) kmsg.Response {
	return func(ctx context.Context) kmsg.Response {
		ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		defer cancel()
		return answer(ctx)
	}
}

// handler decodes the request into Req and runs fn with a bounded context.
func handler[Req any, PReq interface {
	*Req
	kmsg.Request
}, Resp kmsg.Response](b *Backend, fn func(*Backend, context.Context, PReq) Resp) proxy.Handler {
	return func(ctx context.Context, r *proxy.MirrorRequest) (kmsg.Response, error) {
		req := PReq(new(Req))
		req.SetVersion(r.Version)
		if err := req.ReadFrom(r.Body); err != nil {
			return nil, protocol.ErrInvalidRequest.WithMessage("cannot decode %s v%d: %v", protocol.APIName(r.Key), r.Version, err)
		}
		return bounded(func(ctx context.Context) kmsg.Response { return fn(b, ctx, req) })(ctx), nil
	}
}
