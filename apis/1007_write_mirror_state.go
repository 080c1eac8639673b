package apis

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/protocol"
	"github.com/kmirror/kmirror/proxy"
)

// WriteMirrorState (key 1007).
//
// Not served: partition owners write __mirror_state themselves, fenced by
// their writer epoch; accepting state from outside would bypass that
// fencing. Pause, resume and remove are how an operator changes a mirror
// topic's state.

// writeMirrorState refuses the request, whoever sends it.
func writeMirrorState(context.Context, *proxy.MirrorRequest) (kmsg.Response, error) {
	return nil, protocol.ErrInvalidRequest.WithMessage("WriteMirrorState is not served: kmirror instances write __mirror_state directly; use pause, resume or remove to change a mirror topic's state")
}
