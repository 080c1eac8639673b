package proxy

import (
	"encoding/binary"
	"errors"

	"github.com/twmb/franz-go/pkg/kbin"
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
// Almost no response carries them (only those answering NOT_LEADER_OR_FOLLOWER), so a scan
// that skips the topics looks for the tag before anything is decoded: a full decode of every
// Produce response was the proxy's largest own cost per small request after the syscalls.

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
	return rewriteNodesIfAny(p, &resp.Brokers, func(b *kmsg.ProduceResponseBroker) (int32, *string, *int32) {
		return b.NodeID, &b.Host, &b.Port
	})
}

// produceNodeEndpoints reports whether the body of a Produce v10+ response may carry node
// endpoints: true when its top-level tag 0 is present, and also when the body cannot be
// scanned, so that the full decode reports what is wrong with it.
func produceNodeEndpoints(body []byte, version int16) bool {
	b := kbin.Reader{Src: body}
	skipTags := func() {
		for n := b.Uvarint(); n > 0 && b.Ok(); n-- {
			b.Uvarint()
			b.Span(int(b.Uvarint()))
		}
	}
	for topics := b.CompactArrayLen(); topics > 0 && b.Ok(); topics-- {
		if version >= 13 {
			b.Uuid()
		} else {
			b.Span(int(b.Uvarint()) - 1) // compact string; a null (0) is refused as a negative span
		}
		for parts := b.CompactArrayLen(); parts > 0 && b.Ok(); parts-- {
			b.Span(4 + 2 + 8 + 8 + 8) // partition, error code, base offset, log append time, log start offset
			for recs := b.CompactArrayLen(); recs > 0 && b.Ok(); recs-- {
				b.Int32()
				b.UnsafeCompactNullableString()
				skipTags()
			}
			b.UnsafeCompactNullableString()
			skipTags() // tag 0: the partition's current leader, an id and an epoch, no address
		}
		skipTags()
	}
	b.Int32() // throttle time
	if !b.Ok() {
		return true
	}
	for n := b.Uvarint(); n > 0 && b.Ok(); n-- {
		if b.Uvarint() == 0 {
			return true
		}
		b.Span(int(b.Uvarint()))
	}
	return !b.Ok()
}
