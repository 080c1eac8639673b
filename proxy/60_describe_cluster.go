package proxy

import "github.com/twmb/franz-go/pkg/kmsg"

// DescribeCluster (key 60): same rewrite as Metadata. With EndpointType 2 (controllers,
// KIP-919) a broker answers MISMATCHED_ENDPOINT_TYPE with no nodes, so only brokers are seen.
func (p *Proxy) rewriteDescribeCluster(r kmsg.Response) bool {
	resp := r.(*kmsg.DescribeClusterResponse)
	resp.Brokers = rewriteNodes(p, resp.Brokers, func(b *kmsg.DescribeClusterResponseBroker) (int32, *string, *int32) {
		return b.NodeID, &b.Host, &b.Port
	})
	if p.appRoute != nil {
		p.appRoute.rewriteClusterID(&resp.ClusterID)
	}
	return true
}
