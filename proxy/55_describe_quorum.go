package proxy

import "github.com/twmb/franz-go/pkg/kmsg"

// DescribeQuorum (key 55) v2 lists each KRaft voter's listener endpoints. Controllers are
// not reachable through the proxy (clients never need them: they reach the controller through
// brokers), so their addresses are withheld: every node keeps its id with an empty listener
// list. Quorum state (leader, epochs, offsets, lag) passes unchanged.
func (p *Proxy) rewriteDescribeQuorum(r kmsg.Response) bool {
	resp := r.(*kmsg.DescribeQuorumResponse)
	changed := false
	for i := range resp.Nodes {
		if len(resp.Nodes[i].Listeners) > 0 {
			resp.Nodes[i].Listeners = nil
			changed = true
		}
	}
	return changed
}
