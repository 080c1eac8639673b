package proxy

import "github.com/twmb/franz-go/pkg/kmsg"

// ShareFetch (key 78) and ShareAcknowledge (key 79), KIP-932: both responses list the current
// leaders' endpoints (NodeEndpoints) whenever a leader changed; rewritten like Metadata.

func (p *Proxy) rewriteShareFetch(r kmsg.Response) bool {
	resp := r.(*kmsg.ShareFetchResponse)
	return rewriteNodesIfAny(p, &resp.NodeEndpoints, func(b *kmsg.ShareFetchResponseNodeEndpoint) (int32, *string, *int32) {
		return b.NodeID, &b.Host, &b.Port
	})
}

func (p *Proxy) rewriteShareAcknowledge(r kmsg.Response) bool {
	resp := r.(*kmsg.ShareAcknowledgeResponse)
	return rewriteNodesIfAny(p, &resp.NodeEndpoints, func(b *kmsg.ShareAcknowledgeResponseNodeEndpoint) (int32, *string, *int32) {
		return b.NodeID, &b.Host, &b.Port
	})
}
