package proxy

import (
	"encoding/binary"
	"errors"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Produce (key 0).
//
// Request: only acks is read, because acks=0 means the broker never answers and the
// response FIFO must not wait for it. v0-2 start with acks; v3+ put the transactional id
// (nullable string, compact from v9) in front of it.
//
// Response v10+ (KIP-951): when a partition moved, the broker adds the new leaders'
// endpoints (top-level tag 0, kmsg Brokers); those are rewritten like Metadata brokers.

var errShortProduce = errors.New("truncated Produce request body")

// produceAcks returns the acks field of a Produce request body.
func produceAcks(body []byte, version int16, flexible bool) (int16, error) {
	off := 0
	if version >= 3 {
		if flexible {
			n, w := binary.Uvarint(body)
			if w <= 0 {
				return 0, errShortProduce
			}
			off = w
			if n > 0 { // compact nullable string: length+1, 0 = null
				off += int(n - 1)
			}
		} else {
			if len(body) < 2 {
				return 0, errShortProduce
			}
			off = 2
			if n := int16(binary.BigEndian.Uint16(body)); n > 0 {
				off += int(n)
			}
		}
	}
	if off < 0 || off+2 > len(body) {
		return 0, errShortProduce
	}
	return int16(binary.BigEndian.Uint16(body[off:])), nil
}

func (p *Proxy) rewriteProduce(r kmsg.Response) bool {
	resp := r.(*kmsg.ProduceResponse)
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
