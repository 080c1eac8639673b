package proxy

import "github.com/twmb/franz-go/pkg/kmsg"

// FindCoordinator (key 10): v0-3 answer one coordinator at the top level, v4+ a batch in
// Coordinators. Error answers carry NodeID -1 and an empty host; they pass unchanged.
func (p *Proxy) rewriteFindCoordinator(r kmsg.Response) bool {
	resp := r.(*kmsg.FindCoordinatorResponse)
	if resp.Version < 4 {
		if resp.NodeID >= 0 && resp.Host != "" {
			if !p.endpoint(resp.NodeID, &resp.Host, &resp.Port) {
				resp.NodeID, resp.Host, resp.Port = -1, "", -1
				resp.ErrorCode = 15 // COORDINATOR_NOT_AVAILABLE: retriable
			}
		}
		return true
	}
	for i := range resp.Coordinators {
		c := &resp.Coordinators[i]
		if c.NodeID >= 0 && c.Host != "" {
			if !p.endpoint(c.NodeID, &c.Host, &c.Port) {
				c.NodeID, c.Host, c.Port = -1, "", -1
				c.ErrorCode = 15
			}
		}
	}
	return true
}
