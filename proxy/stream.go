package proxy

import (
	"errors"
	"time"
)

// Cut-through of large Produce requests on gnet connections. A Produce of streamMinBytes or
// more is sent upstream in the pieces gnet reads, starting as soon as the first
// streamHeadBytes (header and acks) are in, so the broker receives it while the client is
// still sending. The event loop is the only sender on toUpstream; before every send it
// checks for room, so it never blocks: when the writer falls behind, reading pauses until the
// writer has drained (writerFull, resumed by runUpstreamWriter).

const (
	streamMinBytes  = 256 << 10
	streamHeadBytes = 64 << 10 // covers any header plus a transactional id (< 32 KiB)
	streamQueue     = 16       // toUpstream room for pieces beyond one entry per request
)

var errNotProduce = errors.New("not a Produce request")

// produceHead parses the header and acks of a Produce request from the first bytes of its
// frame (size prefix included).
func produceHead(b []byte) (requestHeader, int16, error) {
	h, err := parseRequestHeader(b[4:])
	if err != nil {
		return h, 0, err
	}
	if h.key != 0 || maxVersion(0) < h.version {
		return h, 0, errNotProduce
	}
	acks, err := produceAcks(b[4+h.bodyOff:], h.version, h.flexible)
	return h, acks, err
}

// upstreamRoom reports whether toUpstream can take one more entry without blocking; if not,
// it arranges for the writer to resume the client side once it has drained.
func (s *session) upstreamRoom() bool {
	if len(s.toUpstream) < cap(s.toUpstream) {
		return true
	}
	s.writerFull.Store(true)
	if len(s.toUpstream) < cap(s.toUpstream) {
		s.writerFull.Store(false)
		return true
	}
	return false
}

// startStream forwards the head of a large Produce; the caller holds a slot for it.
func (s *session) startStream(h requestHeader, acks int16, head []byte, total int) {
	s.beginProduce(h, acks, total)
	s.streamLeft = total - len(head)
	s.streamAcks0 = acks == 0
	s.forward(outbound{frame: head})
}

// beginProduce accounts for a large Produce forwarded before it is whole, and queues the
// response it owes (none for acks=0) before any of it leaves.
func (s *session) beginProduce(h requestHeader, acks int16, total int) {
	s.touch()
	s.p.metrics.request(h.key, total)
	s.p.streamed.Add(1)
	if acks != 0 {
		s.fifo <- &pending{key: h.key, version: h.version, corrID: h.corrID, start: time.Now()}
	}
}

// continueStream forwards the next piece of the current Produce.
func (s *session) continueStream(piece []byte) {
	s.touch()
	s.streamLeft -= len(piece)
	last := s.streamLeft == 0
	s.forward(outbound{frame: piece, noResponse: last && s.streamAcks0})
}
