package proxy

import "github.com/twmb/franz-go/pkg/kmsg"

// Fetch (key 1) v16+ (KIP-951): like Produce, a response may name new leaders' endpoints in
// the top-level tag 0 (kmsg Brokers); they are rewritten. Older versions pass untouched.
//
// TODO(proxy): decoding a Fetch response only to find the tag costs a structural walk per
// response (records are aliased, not copied); a skip-scanner could avoid kmsg entirely.
func (p *Proxy) rewriteFetch(r kmsg.Response) bool {
	resp := r.(*kmsg.FetchResponse)
	if len(resp.Brokers) == 0 {
		return false
	}
	kept := resp.Brokers[:0]
	for _, b := range resp.Brokers {
		if p.endpoint(b.NodeID, &b.Host, &b.Port) {
			kept = append(kept, b)
		}
	}
	resp.Brokers = kept
	return true
}
