package proxy

import "github.com/twmb/franz-go/pkg/kmsg"

// Metadata (key 3), all versions: every broker's host and port become the proxy's advertised
// host and the broker's listener port. A broker the proxy cannot give a port to is dropped
// from the list (its partitions then look leaderless and clients retry) rather than leaked.
func (p *Proxy) rewriteMetadata(r kmsg.Response) bool {
	resp := r.(*kmsg.MetadataResponse)
	kept := resp.Brokers[:0]
	for _, b := range resp.Brokers {
		if p.endpoint(b.NodeID, &b.Host, &b.Port) {
			kept = append(kept, b)
		}
	}
	resp.Brokers = kept
	return true
}
