package proxy

import "github.com/twmb/franz-go/pkg/kmsg"

// DescribeCluster (key 60): same rewrite as Metadata. With EndpointType 2 (controllers,
// KIP-919) a broker answers MISMATCHED_ENDPOINT_TYPE with no nodes, so only brokers are seen.
func (p *Proxy) rewriteDescribeCluster(r kmsg.Response) bool {
	resp := r.(*kmsg.DescribeClusterResponse)
	kept := resp.Brokers[:0]
	for _, b := range resp.Brokers {
		if p.endpoint(b.NodeID, &b.Host, &b.Port) {
			kept = append(kept, b)
		}
	}
	resp.Brokers = kept
	return true
}
