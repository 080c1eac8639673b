// Package apis connects the mirror RPC handlers (one package per RPC under
// apis/) to the proxy: Register decodes each request with the protocol
// package and answers with the handler's response. The proxy never forwards
// these keys to a broker.
package apis

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/apis/addtopics"
	"github.com/kmirror/kmirror/apis/apicore"
	"github.com/kmirror/kmirror/apis/createmirror"
	"github.com/kmirror/kmirror/apis/deletemirror"
	"github.com/kmirror/kmirror/apis/describemirrors"
	"github.com/kmirror/kmirror/apis/lastmirroredoffsets"
	"github.com/kmirror/kmirror/apis/listmirrors"
	"github.com/kmirror/kmirror/apis/mirrorconfigs"
	"github.com/kmirror/kmirror/apis/pauseresume"
	"github.com/kmirror/kmirror/apis/readmirrorstate"
	"github.com/kmirror/kmirror/apis/removetopics"
	"github.com/kmirror/kmirror/protocol"
	"github.com/kmirror/kmirror/proxy"
)

// Register installs every mirror RPC handler.
func Register(h *proxy.Handlers, b *apicore.Backend) {
	h.Register(protocol.KeyCreateMirror, handler(b, createmirror.Handle))
	h.Register(protocol.KeyAddTopicsToMirror, handler(b, addtopics.Handle))
	h.Register(protocol.KeyRemoveTopicsFromMirror, handler(b, removetopics.Handle))
	h.Register(protocol.KeyLastMirroredOffsets, handler(b, lastmirroredoffsets.Handle))
	h.Register(protocol.KeyListMirrors, handler(b, listmirrors.Handle))
	h.Register(protocol.KeyDescribeMirrors, handler(b, describemirrors.Handle))
	h.Register(protocol.KeyReadMirrorState, handler(b, readmirrorstate.Handle))
	h.Register(protocol.KeyPauseMirrorTopics, handler(b, pauseresume.Pause))
	h.Register(protocol.KeyResumeMirrorTopics, handler(b, pauseresume.Resume))
	h.Register(protocol.KeyDeleteMirror, handler(b, deletemirror.Handle))
	h.Register(protocol.KeyWriteMirrorState, func(context.Context, *proxy.MirrorRequest) (kmsg.Response, error) {
		// Partition owners write __mirror_state themselves, fenced by their
		// writer epoch; accepting state from outside would bypass that fencing.
		return nil, protocol.ErrInvalidRequest.WithMessage("WriteMirrorState is not served: kmirror instances write __mirror_state directly; use pause, resume or remove to change a mirror topic's state")
	})
}

// ConfigResources answers DescribeConfigs and IncrementalAlterConfigs that
// name mirror config resources (apis/mirrorconfigs); the proxy forwards
// every other such request to the brokers.
func ConfigResources(b *apicore.Backend) proxy.ConfigResourceHandler {
	return func(key, version int16, body []byte) (func(context.Context) kmsg.Response, bool) {
		switch key {
		case 44:
			req := kmsg.NewPtrIncrementalAlterConfigsRequest()
			req.SetVersion(version)
			if req.ReadFrom(body) != nil || !mirrorconfigs.AlterRequest(req) {
				return nil, false // undecodable requests are the broker's to refuse
			}
			return func(ctx context.Context) kmsg.Response {
				ctx, cancel := context.WithTimeout(ctx, apicore.Timeout)
				defer cancel()
				return mirrorconfigs.Alter(ctx, b, req)
			}, true
		case 32:
			req := kmsg.NewPtrDescribeConfigsRequest()
			req.SetVersion(version)
			if req.ReadFrom(body) != nil || !mirrorconfigs.DescribeRequest(req) {
				return nil, false
			}
			return func(ctx context.Context) kmsg.Response {
				ctx, cancel := context.WithTimeout(ctx, apicore.Timeout)
				defer cancel()
				return mirrorconfigs.Describe(ctx, b, req)
			}, true
		}
		return nil, false
	}
}

// handler decodes the request into Req and runs fn with a bounded context.
func handler[Req any, PReq interface {
	*Req
	kmsg.Request
}, Resp kmsg.Response](b *apicore.Backend, fn func(context.Context, *apicore.Backend, PReq) Resp) proxy.Handler {
	return func(ctx context.Context, r *proxy.MirrorRequest) (kmsg.Response, error) {
		req := PReq(new(Req))
		req.SetVersion(r.Version)
		if err := req.ReadFrom(r.Body); err != nil {
			return nil, protocol.ErrInvalidRequest.WithMessage("cannot decode %s v%d: %v", protocol.APIName(r.Key), r.Version, err)
		}
		ctx, cancel := context.WithTimeout(ctx, apicore.Timeout)
		defer cancel()
		return fn(ctx, b, req), nil
	}
}
