package proxy

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"

	"github.com/panjf2000/gnet/v2"
)

// Bulk hand-off. A plaintext connection that sends a large Produce leaves its gnet event loop
// for a goroutine of its own, which splices the body of every large Produce from the client
// socket into the upstream socket (splice(2): the bytes never enter the proxy's memory).
//
// Why: gnet reads every byte that arrives into its own buffers and cannot be told to stop,
// so while gnet polls a socket each request byte is copied three times (into gnet's buffer,
// into a frame while the upstream socket is full, into the upstream socket). A broker reads a
// connection's requests one at a time through a 100 KiB receive buffer, so at hundreds of
// MB/s the upstream socket is full most of the time. Measured on the 2-vCPU development VM
// with a sink reading at 350 MB/s in 200 KiB reads: a copying relay used 700–740 ms of CPU
// per GiB, a splicing one 250–265 ms; on a machine shared with clients and brokers, that CPU
// is throughput taken from them.
//
// The hand-off is final for the connection and happens at a request boundary: gnet's
// buffered bytes go with it, gnet closes its descriptor and stops polling (the session keeps
// the socket through the duplicate it writes responses on). Small requests keep going
// through the session core as on the TLS path (blocking reads, so TCP pushes back on the
// client). Only for plain TCP upstreams (TLS needs its record layer) and never while topics
// are read-only (the guard must see every partition of a Produce before any of it leaves).

// bulkReadBytes is the read buffer of a handed-off connection: a small request and the head
// of the next in one read; a large request's body is spliced past it.
const bulkReadBytes = 64 << 10

// handOff moves the connection to serveBulk if it can be, and reports whether it did: gnet
// must then close its side (gnet.Close), the session lives on.
func (h *gnetHandler) handOff(c gnet.Conn, s *session) bool {
	g, ok := s.client.(*gnetClient)
	if !ok || s.upRaw.Load() == nil {
		return false
	}
	tc, ok := g.out.(*net.TCPConn)
	if !ok {
		return false
	}
	prefix := make([]byte, c.InboundBuffered())
	if _, err := c.Read(prefix); err != nil {
		return false
	}
	g.handedOff.Store(true)
	c.SetContext(nil) // OnClose: the session lives on
	s.p.handedOff.Add(1)
	s.p.wg.Add(1)
	go s.serveBulk(tc, prefix)
	return true
}

// bulkSource reads what gnet had buffered, then the socket.
type bulkSource struct {
	prefix []byte
	conn   *net.TCPConn
}

func (b *bulkSource) Read(p []byte) (int, error) {
	if len(b.prefix) > 0 {
		n := copy(p, b.prefix)
		b.prefix = b.prefix[n:]
		return n, nil
	}
	return b.conn.Read(p)
}

// takeBuffered takes up to max bytes already read from the socket, in stream order: what the
// read buffer holds, then what is left of gnet's bytes.
func takeBuffered(br *bufio.Reader, src *bulkSource, max int) []byte {
	k := min(max, br.Buffered())
	m := min(max-k, len(src.prefix))
	piece := appendBuffered(getFrame(k + m)[:0], br, k)
	piece = append(piece, src.prefix[:m]...)
	src.prefix = src.prefix[m:]
	return piece
}

// appendBuffered moves up to max bytes that br has read ahead to dst: bytes already in user
// space must go before anything spliced from the socket behind them.
func appendBuffered(dst []byte, br *bufio.Reader, max int) []byte {
	k := min(max, br.Buffered())
	b, _ := br.Peek(k)
	dst = append(dst, b...)
	_, _ = br.Discard(k)
	return dst
}

// serveBulk reads the requests of a handed-off connection until it ends.
func (s *session) serveBulk(conn *net.TCPConn, prefix []byte) {
	defer s.p.wg.Done()
	s.spliced = make(chan error, 1)
	src := &bulkSource{prefix: prefix, conn: conn}
	br := bufio.NewReaderSize(src, bulkReadBytes)
	for {
		if s.p.draining.Load() {
			<-s.ctx.Done()
			return
		}
		if err := s.bulkRequest(br, src); err != nil {
			s.closeWith(err)
			return
		}
	}
}

// bulkRequest forwards one request, splicing the body of a large Produce.
func (s *session) bulkRequest(br *bufio.Reader, src *bulkSource) error {
	size, err := br.Peek(4)
	if err != nil {
		return fmt.Errorf("reading request: %w", err)
	}
	n := int32(binary.BigEndian.Uint32(size))
	if 4+int(n) < streamMinBytes || n > s.p.cfg.MaxFrameBytes {
		frame, err := readFrame(br, s.p.cfg.MaxFrameBytes) // also refuses a bad size
		if err != nil {
			return fmt.Errorf("reading request: %w", err)
		}
		return s.dispatchAcquired(frame)
	}
	total := 4 + int(n)
	// The head is parsed where the read buffer holds it (bulkReadBytes ≥ streamHeadBytes):
	// a spliced Produce's first bytes leave from there without a copy (spliceInline).
	head, err := br.Peek(streamHeadBytes)
	if err != nil {
		return fmt.Errorf("reading %d-byte request: %w", n, err)
	}
	if h, acks, err := produceHead(head); err == nil && !s.p.guardActive() && s.p.largeProduceClear(h, head) {
		if !s.acquire() {
			return net.ErrClosed // the session is closing
		}
		return s.spliceProduce(h, acks, total, br, src)
	}
	// Not a Produce, topics are read-only, or it may touch kmirror's internals: the request is
	// handled whole.
	whole := getFrame(total)
	if _, err := io.ReadFull(br, whole); err != nil {
		putFrame(whole)
		return fmt.Errorf("reading %d-byte request: %w", n, err)
	}
	return s.dispatchAcquired(whole)
}

// dispatchAcquired dispatches a whole frame once a slot is free.
func (s *session) dispatchAcquired(frame []byte) error {
	if !s.acquire() {
		putFrame(frame)
		return net.ErrClosed
	}
	return s.dispatch(frame)
}

// spliceProduce forwards a large Produce of total bytes, whose head the read buffer holds:
// by the reader itself when nothing is queued for the writer goroutine (spliceInline), else
// its head and whatever is already buffered go as frames and the rest is spliced by the
// writer goroutine behind the frames queued before it. The caller holds a slot for it.
func (s *session) spliceProduce(h requestHeader, acks int16, total int, br *bufio.Reader, src *bulkSource) error {
	if raw := s.upRaw.Load(); raw != nil && raw.tc != nil && s.queued.Load() == 0 && !s.p.testWriterSplices.Load() {
		return s.spliceInline(h, acks, total, br, src, raw.tc)
	}
	head := getFrame(streamHeadBytes)
	_, _ = io.ReadFull(br, head) // Peek said the read buffer holds it
	s.startStream(h, acks, head, total)
	rest := total - len(head)
	if piece := takeBuffered(br, src, rest); len(piece) > 0 {
		s.continueStream(piece)
		rest -= len(piece)
	} else {
		putFrame(piece)
	}
	if rest == 0 {
		return nil
	}
	s.streamLeft = 0 // the splice entry carries the rest
	s.queued.Add(1)
	select {
	case s.toUpstream <- outbound{spliceFrom: src.conn, spliceN: int64(rest), noResponse: s.streamAcks0}:
	case <-s.ctx.Done():
		return net.ErrClosed
	}
	select {
	case err := <-s.spliced:
		s.touch()
		return err
	case <-s.ctx.Done():
		return net.ErrClosed
	}
}

// spliceInline forwards a large Produce from the reader goroutine itself: what the read
// buffer (and gnet's hand-over) holds of it is written from there, the rest spliced. Nothing
// is queued for the writer goroutine, and only this goroutine queues, so every earlier
// request is in the upstream socket already and order holds; the writer, idle, needs upMu
// for nothing meanwhile. It saves the copy of the head into frames and two goroutine
// hand-offs per request (to the writer and back), which the relay does not pay either.
func (s *session) spliceInline(h requestHeader, acks int16, total int, br *bufio.Reader, src *bulkSource, up *net.TCPConn) error {
	s.beginProduce(h, acks, total)
	s.upMu.Lock()
	defer s.upMu.Unlock()
	// What the read buffer holds, then gnet's bytes behind it: one writev, no copy.
	k := min(total, br.Buffered())
	b, _ := br.Peek(k)
	m := min(total-k, len(src.prefix))
	held := net.Buffers{b, src.prefix[:m]}
	if _, err := held.WriteTo(up); err != nil {
		return fmt.Errorf("writing a %d-byte Produce to upstream %s: %w", total, up.RemoteAddr(), err)
	}
	_, _ = br.Discard(k)
	src.prefix = src.prefix[m:]
	rest := total - k - m
	if rest > 0 {
		if _, err := io.CopyN(up, src.conn, int64(rest)); err != nil { // splice(2)
			return fmt.Errorf("splicing a %d-byte Produce body to upstream %s: %w", rest, up.RemoteAddr(), err)
		}
	}
	s.p.spliced.Add(1)
	s.p.splicedInline.Add(1)
	s.touch()
	if acks == 0 {
		s.release() // no response owed: the slot was for the bytes not yet written
	}
	return nil
}
