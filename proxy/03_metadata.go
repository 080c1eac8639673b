package proxy

import "github.com/twmb/franz-go/pkg/kmsg"

// Metadata (key 3), all versions: every broker's host and port become the proxy's advertised
// host and the broker's listener port. A broker the proxy cannot give a port to is dropped
// from the list (its partitions then look leaderless and clients retry) rather than leaked.
func (p *Proxy) rewriteMetadata(r kmsg.Response) bool {
	resp := r.(*kmsg.MetadataResponse)
	resp.Brokers = rewriteNodes(p, resp.Brokers, func(b *kmsg.MetadataResponseBroker) (int32, *string, *int32) {
		return b.NodeID, &b.Host, &b.Port
	})
	if p.appRoute != nil {
		p.appRoute.rewriteMetadata(resp)
	}
	return true
}
