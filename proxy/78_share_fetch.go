package proxy

import "github.com/twmb/franz-go/pkg/kmsg"

// ShareFetch (key 78) and ShareAcknowledge (key 79), KIP-932: both responses list the current
// leaders' endpoints (NodeEndpoints) whenever a leader changed; rewritten like Metadata.

func (p *Proxy) rewriteShareFetch(r kmsg.Response) bool {
	resp := r.(*kmsg.ShareFetchResponse)
	if len(resp.NodeEndpoints) == 0 {
		return false
	}
	kept := resp.NodeEndpoints[:0]
	for _, b := range resp.NodeEndpoints {
		if p.endpoint(b.NodeID, &b.Host, &b.Port) {
			kept = append(kept, b)
		}
	}
	resp.NodeEndpoints = kept
	return true
}

func (p *Proxy) rewriteShareAcknowledge(r kmsg.Response) bool {
	resp := r.(*kmsg.ShareAcknowledgeResponse)
	if len(resp.NodeEndpoints) == 0 {
		return false
	}
	kept := resp.NodeEndpoints[:0]
	for _, b := range resp.NodeEndpoints {
		if p.endpoint(b.NodeID, &b.Host, &b.Port) {
			kept = append(kept, b)
		}
	}
	resp.NodeEndpoints = kept
	return true
}
