package proxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Concurrency map of one client connection (a session):
//
//   - The client side delivers frames to dispatch from exactly one goroutine at a time:
//     the connection's reader goroutine (serveBulk on plaintext, serveTLSConn on TLS) or, with
//     plaintext_engine: gnet, the event loop that owns the connection (OnTraffic).
//   - The upstream writer goroutine dials the broker, then writes forwarded frames in order.
//   - The upstream reader goroutine owns the response FIFO: it pops pending entries in request
//     order, reads the matching response from the broker (or waits for a local answer),
//     rewrites it if its key carries broker addresses, and writes it to the client. With the
//     FIFO empty it waits in a read of the upstream socket (waitIdle), which pushLocal ends.
//
// slots is the in-flight semaphore shared by those goroutines: one token per request that
// still owes the client a response, plus one per acks=0 Produce not yet written upstream.
// With every slot taken the client side stops reading, so buffering per connection is bounded
// by MaxInFlight frames. toUpstream has MaxInFlight capacity and fifo twice that (a locally
// answered request may queue the proxy's own authorisation question before its answer,
// authz.go), so sends on them never block once a slot is held.
//
// Nothing is shared between sessions except the Proxy's broker table and metrics.

// clientSide is the transport to the client: a *net.TCPConn (plaintext), gnet, or TLS.
type clientSide interface {
	// writeFrame sends one response frame, blocking until it is written or the write
	// failed (which closes the connection). The frame may be the response reader's buffer
	// (deliverBuffered): the transport is done with it when writeFrame returns.
	writeFrame(frame []byte)
	// relay writes head, then n bytes read from src, blocking until done.
	relay(head []byte, src io.Reader, n int64) error
	// resume restarts reading after the session stopped for lack of slots.
	resume()
	close()
	remoteAddr() net.Addr
}

// route says which upstream broker a listener leads to, and through which application
// route (route.go; "" for the destination's own listeners).
type route struct {
	bootstrap bool
	node      int32
	app       string
}

// target is the route of this proxy's bootstrap listener or broker node's listener.
func (p *Proxy) target(bootstrap bool, node int32) route {
	r := route{bootstrap: bootstrap, node: node}
	if p.appRoute != nil {
		r.app = p.appRoute.name
	}
	return r
}

func (r route) String() string {
	s := "bootstrap"
	if !r.bootstrap {
		s = fmt.Sprintf("broker-%d", r.node)
	}
	if r.app != "" {
		return "route-" + r.app + "/" + s
	}
	return s
}

// pending is one request that owes the client a response.
type pending struct {
	key, version int16
	corrID       int32
	start        time.Time
	local        chan []byte           // non-nil: answered by the proxy itself (a complete frame)
	merge        *kmsg.ProduceResponse // refusals to merge into a split Produce's response (guard.go)
	// intercept: the proxy's own request (authz.go); the whole response goes here, not to
	// the client, and no slot is released for it.
	intercept chan []byte
	sasl      bool // SaslHandshake/SaslAuthenticate: the tracker reads the response (sasl.go)
	// watch reads the whole response frame before it is delivered (route_hold.go).
	watch func(frame []byte)
}

// outbound is one frame to forward upstream.
type outbound struct {
	frame      []byte
	off        int  // bytes of frame already written by the fast path
	noResponse bool // acks=0 Produce: the broker sends nothing back

	// No frame: splice spliceN bytes from spliceFrom, then report on session.spliced
	// (bulk.go).
	spliceFrom *net.TCPConn
	spliceN    int64
}

type session struct {
	p      *Proxy
	route  route
	client clientSide
	log    *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc

	slots      chan struct{}
	fifo       chan *pending
	toUpstream chan outbound
	paused     atomic.Bool // client side stopped reading because every slot was taken
	writerFull atomic.Bool // client side stopped reading because toUpstream was full

	// Fast path (fastpath.go): the client side writes a request upstream itself when
	// nothing is queued for the writer goroutine.
	upRaw  atomic.Pointer[upstreamRaw]
	upMu   sync.Mutex   // serialises writes to the upstream socket
	queued atomic.Int64 // entries sent to toUpstream and not yet written

	// Cut-through of a large Produce (gnet path only; owned by the event loop).
	streamLeft  int        // bytes of the current request still to forward
	streamAcks0 bool       // the current request is acks=0: its slot is freed after the last byte
	spliced     chan error // a handed-off connection's splices report here, one at a time (bulk.go)

	lastActive atomic.Int64 // unix nanos of the last request or response

	// The reader's idle wait in the upstream socket (waitIdle, pushLocal).
	readerMu     sync.Mutex
	readerIdle   bool // the reader waits in a read of the upstream socket, no response owed
	readerKicked bool // a read deadline in the past was set to end that wait

	// produces counts a route's Produce requests (route.go): the freeze's barrier.
	produces produceBarrier
	// refusedFrozen: the route's freeze refused a Produce on this connection. Lifting the
	// freeze closes it (FreezeRoute): requests the client pipelined behind the refused one
	// would otherwise reach the primary ahead of its retry, out of sequence.
	refusedFrozen atomic.Bool

	sasl saslTracker // the client's SASL exchange with its broker (sasl.go)
	auth authState   // authorisation of local answers (authz.go)

	mu       sync.Mutex
	upstream net.Conn
	closed   bool
}

func (p *Proxy) newSession(r route, client clientSide) *session {
	ctx, cancel := context.WithCancel(p.ctx)
	s := &session{
		p:          p,
		route:      r,
		client:     client,
		log:        p.log.With("listener", r.String(), "client", client.remoteAddr().String()),
		ctx:        ctx,
		cancel:     cancel,
		slots:      make(chan struct{}, p.cfg.MaxInFlight),
		fifo:       make(chan *pending, 2*p.cfg.MaxInFlight),
		toUpstream: make(chan outbound, p.cfg.MaxInFlight+streamQueue),
	}
	s.touch()
	p.sessions.Store(s, struct{}{})
	p.metrics.connOpened(r)
	p.wg.Add(1)
	go s.runUpstreamWriter()
	return s
}

func (s *session) touch() { s.lastActive.Store(time.Now().UnixNano()) }

// tryAcquire takes an in-flight slot without blocking.
func (s *session) tryAcquire() bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// acquire takes an in-flight slot, blocking (TLS path: true TCP backpressure). A free slot
// is taken without the two-channel select, which locks both channels: this runs for every
// request a reader goroutine takes.
func (s *session) acquire() bool {
	if s.tryAcquire() {
		return true
	}
	select {
	case s.slots <- struct{}{}:
		return true
	case <-s.ctx.Done():
		return false
	}
}

func (s *session) release() {
	<-s.slots
	if s.paused.CompareAndSwap(true, false) {
		s.client.resume()
	}
}

func (s *session) inFlight() int { return len(s.slots) }

// dispatch handles one complete request frame (with size prefix). The caller holds a slot
// for it; dispatch consumes the slot (it is released when the response has been delivered,
// or after writing an acks=0 Produce). An error means the connection must be closed.
func (s *session) dispatch(frame []byte) error {
	s.touch()
	h, err := parseRequestHeader(frame[4:])
	if err != nil {
		s.release()
		s.p.metrics.requestError(h.key)
		return fmt.Errorf("malformed request (key %d v%d): %w", h.key, h.version, err)
	}
	s.p.metrics.request(h.key, len(frame))
	p := &pending{key: h.key, version: h.version, corrID: h.corrID, start: time.Now()}
	if h.key == keySaslHandshake || h.key == keySaslAuthenticate { // rare: one branch per request
		if refusal := s.watchSASL(h, frame, p); refusal != nil {
			p.local = refusal
			s.pushLocal(p)
			return nil
		}
	}

	if h.key == keyHeartbeat && s.p.appRoute != nil && s.p.appRoute.hold.Load() != nil {
		s.watchHeartbeat(h, frame, p)
	}
	if local, err := s.p.answerLocally(s, h, frame); err != nil {
		s.release()
		s.p.metrics.requestError(h.key)
		return err
	} else if local != nil {
		p.local = local
		s.pushLocal(p)
		return nil
	}
	var acks int16 = -1
	if h.key == 0 {
		if acks, err = produceAcks(frame[4+h.bodyOff:], h.version, h.flexible); err != nil {
			s.release()
			s.p.metrics.requestError(h.key)
			return fmt.Errorf("malformed Produce request: %w", err)
		}
	}
	routeProduce := h.key == 0 && s.p.appRoute != nil && acks != 0
	if routeProduce {
		s.produces.claimed.Add(1) // before the freeze is read (route.go, FreezeRoute)
	}
	local, frame, err := s.enforce(h, frame, p, acks)
	if err != nil {
		s.release()
		s.p.metrics.requestError(h.key)
		return err
	}
	if local != nil {
		// Refused whole: it never reached the primary, and counts as answered once its
		// answer is delivered behind the responses owed before it (produceAnswered).
		if len(local) == 0 { // acks=0 and everything refused: no response is owed
			s.release()
			return nil
		}
		ch := make(chan []byte, 1)
		ch <- local
		p.local = ch
		s.pushLocal(p)
		return nil
	}
	if acks == 0 {
		s.forward(outbound{frame: frame, noResponse: true})
		return nil
	}
	// The FIFO entry goes first so the reader expects the response before it can arrive.
	s.fifo <- p
	s.forward(outbound{frame: frame})
	return nil
}

// runUpstreamWriter dials the broker, starts the reader, and forwards frames in order,
// batching whatever is queued into one writev.
func (s *session) runUpstreamWriter() {
	defer s.p.wg.Done()
	conn := s.connectUpstream()
	if conn == nil {
		return
	}
	var b upstreamBatch
	var next outbound // a splice that ended the previous batch, if spliceFrom is set
	for {
		ob := next
		if next.spliceFrom != nil {
			next = outbound{}
		} else {
			select {
			case <-s.ctx.Done():
				return
			case ob = <-s.toUpstream:
			}
		}
		var err error
		if ob.spliceFrom != nil {
			err = s.spliceUpstream(conn, ob)
		} else {
			next, err = s.writeBatch(conn, &b, ob)
		}
		if err != nil {
			s.closeWith(err)
			return
		}
	}
}

// connectUpstream dials the broker for the session and starts the response reader; nil
// when the session is over (closed, or the dial failed).
func (s *session) connectUpstream() net.Conn {
	var conn net.Conn
	for {
		up := s.p.upstream()
		var err error
		if conn, err = s.p.dialUpstream(s.ctx, s.route); err != nil {
			s.closeWith(fmt.Errorf("connecting upstream for %s: %w", s.route, err))
			return nil
		}
		if s.p.upstream() == up {
			break
		}
		// A route switched while this dial went to the cluster it led to: the switch keeps
		// the connections that had no upstream yet (SwitchRoute), so this one dials again.
		_ = conn.Close()
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = conn.Close()
		return nil
	}
	s.upstream = conn
	s.mu.Unlock()
	if tc, ok := conn.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			s.upRaw.Store(newUpstreamRaw(rc, tc))
		}
	}
	s.p.wg.Add(1)
	go s.runUpstreamReader(conn)
	return conn
}

// spliceUpstream forwards a handed-off Produce body from the client socket (bulk.go).
func (s *session) spliceUpstream(conn net.Conn, ob outbound) error {
	s.upMu.Lock()
	_, err := io.CopyN(conn, ob.spliceFrom, ob.spliceN) // *net.TCPConn to *net.TCPConn: splice(2)
	s.upMu.Unlock()
	s.p.spliced.Add(1)
	s.spliced <- err
	if err != nil {
		return fmt.Errorf("splicing a %d-byte Produce body to upstream %s: %w", ob.spliceN, conn.RemoteAddr(), err)
	}
	s.written(1, ob.noResponse)
	return nil
}

// upstreamBatch is the writer's writev, reused from batch to batch.
type upstreamBatch struct {
	bufs   net.Buffers // what is written: each frame from its offset (consumed by the write)
	frames net.Buffers // the frames themselves, back to the pool once written
	acks0  int         // acks=0 Produce requests: their slots are free once written
}

func (b *upstreamBatch) add(ob outbound) {
	b.bufs = append(b.bufs, ob.frame[ob.off:])
	b.frames = append(b.frames, ob.frame)
	if ob.noResponse {
		b.acks0++
	}
}

// writeBatch writes ob and whatever else is queued (up to 64 frames) in one writev. A splice
// met in the queue ends the batch and is returned to go next, after the frames before it.
func (s *session) writeBatch(conn net.Conn, b *upstreamBatch, ob outbound) (next outbound, err error) {
	b.bufs, b.frames, b.acks0 = b.bufs[:0], b.frames[:0], 0
	b.add(ob)
drain:
	for len(b.bufs) < 64 {
		select {
		case ob = <-s.toUpstream:
			if ob.spliceFrom != nil {
				next = ob
				break drain
			}
			b.add(ob)
		default:
			break drain
		}
	}
	queued := len(b.frames)
	s.upMu.Lock()
	_, err = b.bufs.WriteTo(conn) // consumes bufs; frames keeps the buffers
	s.upMu.Unlock()
	if err != nil {
		return next, fmt.Errorf("writing to upstream %s: %w", conn.RemoteAddr(), err)
	}
	for i, f := range b.frames {
		putFrame(f)
		b.frames[i] = nil
	}
	for range b.acks0 {
		s.release()
	}
	s.written(queued, false)
	return next, nil
}

// written accounts for n queued entries having left for upstream (the last an acks=0
// Produce's when acks0).
func (s *session) written(n int, acks0 bool) {
	s.queued.Add(int64(-n))
	if acks0 {
		s.release()
	}
	if s.writerFull.CompareAndSwap(true, false) {
		s.client.resume()
	}
}

// runUpstreamReader delivers responses to the client in request order.
func (s *session) runUpstreamReader(conn net.Conn) {
	defer s.p.wg.Done()
	// One read takes a small response's header and body together, and often the next
	// responses too when the client pipelines; large responses are spliced after what the
	// buffer holds of them (relayResponse).
	br := bufio.NewReaderSize(conn, respBufferBytes)
	for {
		var p *pending
		select {
		case p = <-s.fifo:
		default:
			if err := s.waitIdle(br, conn); err != nil {
				if s.ctx.Err() == nil {
					s.closeWith(fmt.Errorf("upstream %s, with no request in flight: %w", conn.RemoteAddr(), err))
				}
				return
			}
			select {
			case <-s.ctx.Done():
				return
			case p = <-s.fifo:
			}
		}
		if p.local != nil {
			var frame []byte
			select {
			case <-s.ctx.Done():
				return
			case frame = <-p.local:
			}
			s.deliver(p, frame, false, true)
			s.produceAnswered(p)
			continue
		}
		if err := s.relayResponse(p, br, conn); err != nil {
			if s.ctx.Err() != nil {
				return // the client went away first: the request was abandoned, not failed
			}
			s.p.metrics.requestError(p.key)
			s.closeWith(err)
			return
		}
		s.produceAnswered(p)
	}
}

// produceAnswered counts a route's Produce as answered (FreezeRoute's barrier) when its
// response reached the client. Responses go out in request order, so answered reaching a
// count taken at the freeze means every Produce read before it was answered; counting a
// refusal when it is made instead would let it stand in for an earlier write still at the
// broker. (An acks=0 Produce owes no response and is not counted on either side.)
func (s *session) produceAnswered(p *pending) {
	if p.key == 0 && s.p.appRoute != nil {
		s.produces.answered.Add(1)
	}
}

// waitIdle waits, with no response owed, until the upstream socket has bytes or a local
// answer is queued (pushLocal ends the wait with a read deadline in the past). Waiting in the
// socket's read rather than on the FIFO means a forwarded request does not wake the reader
// only for it to find nothing to read: the response's arrival is its one wake-up (the FIFO
// entry is queued before the request is forwarded). The wait is the only read a kick can
// reach: pushLocal kicks only while readerIdle, and the deadline is cleared before any other
// read.
func (s *session) waitIdle(br *bufio.Reader, conn net.Conn) error {
	s.readerMu.Lock()
	s.readerIdle = true
	s.readerMu.Unlock()
	var err error
	if len(s.fifo) == 0 && br.Buffered() == 0 { // an entry queued before readerIdle was set did not kick
		_, err = br.Peek(1) // one read of what the socket has
	}
	s.readerMu.Lock()
	s.readerIdle = false
	kicked := s.readerKicked
	s.readerKicked = false
	s.readerMu.Unlock()
	if kicked {
		_ = conn.SetReadDeadline(time.Time{})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = nil
		}
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("closed the connection")
	}
	return err
}

// pushLocal queues an entry the proxy answers itself and ends the reader's idle wait.
func (s *session) pushLocal(p *pending) {
	s.fifo <- p
	s.readerMu.Lock()
	defer s.readerMu.Unlock()
	if !s.readerIdle || s.readerKicked {
		return
	}
	s.mu.Lock()
	up := s.upstream
	s.mu.Unlock()
	if up != nil {
		s.readerKicked = true
		_ = up.SetReadDeadline(time.Unix(1, 0))
	}
}

// respBufferBytes covers the responses that come in numbers (Produce, small Fetch,
// heartbeats, offset commits) and is small enough to give every connection one.
const respBufferBytes = 16 << 10

// relayMinBytes: a response of this size or more that needs no rewrite is relayed socket to
// socket as it arrives (splice(2) on plain TCP, so its bytes never enter the proxy's memory):
// the client receives the start of a large Fetch response while the rest is still arriving,
// instead of waiting for the proxy to hold all of it (store-and-forward halves consume
// throughput). Smaller responses are read whole and written in one call, which is cheaper.
const relayMinBytes = 64 << 10

// relayResponse reads the response to p from upstream and hands it to the client: whole and
// rewritten when its key carries addresses, else streamed through in chunks.
func (s *session) relayResponse(p *pending, br *bufio.Reader, conn net.Conn) error {
	head, total, err := s.responseHead(p, br, conn.RemoteAddr())
	if err != nil {
		return err
	}
	observed := p.intercept != nil || p.sasl || p.watch != nil
	if !observed && total <= br.Buffered() {
		return s.deliverBuffered(p, br, total)
	}
	_, _ = br.Discard(8)
	switch {
	case observed:
		return s.deliverObserved(p, br, head, total, conn.RemoteAddr())
	case needsRewrite(p.key, p.version) || p.merge != nil:
		return s.deliverRewritten(p, br, head, total, conn.RemoteAddr())
	case total < relayMinBytes:
		frame, err := readResponseBody(p, br, head, total, conn.RemoteAddr())
		if err != nil {
			return err
		}
		s.deliver(p, frame, true, true)
		return nil
	}
	return s.spliceResponse(p, br, head, total, conn)
}

// responseHead peeks at the next response's size and correlation id (not consuming them, so
// that a response the buffer holds whole is written from it) and checks both.
func (s *session) responseHead(p *pending, br *bufio.Reader, upstream net.Addr) (head [8]byte, total int, err error) {
	hb, err := br.Peek(8)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return head, 0, fmt.Errorf("upstream %s closed the connection with %s v%d in flight", upstream, kmsg.NameForKey(p.key), p.version)
		}
		return head, 0, fmt.Errorf("reading %s response from %s: %w", kmsg.NameForKey(p.key), upstream, err)
	}
	copy(head[:], hb)
	size := int32(binary.BigEndian.Uint32(head[:]))
	if size < 4 || size > s.p.cfg.MaxFrameBytes {
		return head, 0, fmt.Errorf("%w: upstream %s sent a %d-byte response, limit %d", errFrameTooLarge, upstream, size, s.p.cfg.MaxFrameBytes)
	}
	if corrID := int32(binary.BigEndian.Uint32(head[4:])); corrID != p.corrID {
		return head, 0, fmt.Errorf("upstream %s answered correlation id %d while %d (%s) was next", upstream, corrID, p.corrID, kmsg.NameForKey(p.key))
	}
	return head, 4 + int(size), nil
}

// readResponseBody reads the rest of a response whose 8-byte head was consumed into a pooled frame
// of its own (putFrame when done).
func readResponseBody(p *pending, br *bufio.Reader, head [8]byte, total int, upstream net.Addr) ([]byte, error) {
	frame := getFrame(total)
	copy(frame, head[:])
	if _, err := io.ReadFull(br, frame[8:]); err != nil {
		putFrame(frame)
		return nil, fmt.Errorf("reading %s response body from %s: %w", kmsg.NameForKey(p.key), upstream, err)
	}
	return frame, nil
}

// deliverObserved reads a response the proxy itself looks at — its own question
// (intercept), a SASL step, a watched answer — into a frame it keeps (not pooled: the
// observer may hold it).
func (s *session) deliverObserved(p *pending, br *bufio.Reader, head [8]byte, total int, upstream net.Addr) error {
	frame := make([]byte, total)
	copy(frame, head[:])
	if _, err := io.ReadFull(br, frame[8:]); err != nil {
		return fmt.Errorf("reading %s response body from %s: %w", kmsg.NameForKey(p.key), upstream, err)
	}
	if p.intercept != nil {
		p.intercept <- frame // the proxy's own question: not the client's, no slot
		return nil
	}
	if p.watch != nil {
		p.watch(frame)
	} else {
		s.sasl.onResponse(p.key, p.version, frame, time.Now())
	}
	s.deliver(p, frame, false, true)
	return nil
}

// deliverRewritten reads a response that carries addresses (or is merged) whole and hands
// the client its rewrite.
func (s *session) deliverRewritten(p *pending, br *bufio.Reader, head [8]byte, total int, upstream net.Addr) error {
	frame, err := readResponseBody(p, br, head, total, upstream)
	if err != nil {
		return err
	}
	rewritten, err := s.p.rewriteResponse(p, frame)
	if err != nil {
		putFrame(frame)
		return err
	}
	if &rewritten[0] != &frame[0] {
		putFrame(frame) // the rewrite copied everything it needs
	}
	s.deliver(p, rewritten, true, true)
	return nil
}

// spliceResponse relays a large response that needs no rewrite socket to socket as it
// arrives: what the buffer holds of the body goes with the header, the rest is spliced.
func (s *session) spliceResponse(p *pending, br *bufio.Reader, head [8]byte, total int, conn net.Conn) error {
	s.touch()
	s.p.relayed.Add(1)
	start := appendBuffered(append(getFrame(8 + br.Buffered())[:0], head[:]...), br, total-8)
	err := s.client.relay(start, conn, int64(total-len(start)))
	putFrame(start)
	if err != nil {
		// Part of the response may have left: the client's stream is unusable either way.
		return fmt.Errorf("relaying a %d-byte %s response from %s: %w", total, kmsg.NameForKey(p.key), conn.RemoteAddr(), err)
	}
	s.touch()
	s.p.metrics.bytesOut(total)
	s.p.metrics.latencyOf(p.key, time.Since(p.start))
	s.release()
	return nil
}

// deliverBuffered hands the client a response that the reader's buffer holds whole (most
// small ones: one read takes a response, often several): it is written from the buffer,
// rewritten first if its key needs it, without a copy into a frame of its own.
func (s *session) deliverBuffered(p *pending, br *bufio.Reader, total int) error {
	frame, _ := br.Peek(total)
	s.p.fromBuf.Add(1)
	defer br.Discard(total) // Buffered said the bytes are there
	if !needsRewrite(p.key, p.version) && p.merge == nil {
		s.deliver(p, frame, false, true)
		return nil
	}
	rewritten, err := s.p.rewriteResponse(p, frame)
	if err != nil {
		return err
	}
	// A rewrite encodes into a buffer of its own; an unchanged response is still the buffer's.
	s.deliver(p, rewritten, false, true)
	return nil
}

// deliver hands bytes of p's response to the client; last marks the end of the response,
// which frees p's in-flight slot.
func (s *session) deliver(p *pending, b []byte, pooled, last bool) {
	s.touch()
	s.p.metrics.bytesOut(len(b))
	if last {
		s.p.metrics.latencyOf(p.key, time.Since(p.start))
	}
	if hook := s.p.testHookClientFrame; hook != nil {
		hook(b)
	}
	s.client.writeFrame(b) // synchronous: no callback, which would be an allocation per response
	if pooled {
		putFrame(b)
	}
	if last {
		s.release()
	}
}

// closeWith closes the session once; err explains why (nil: normal close).
func (s *session) closeWith(err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	up := s.upstream
	s.mu.Unlock()

	s.cancel()
	if up != nil {
		_ = up.Close()
	}
	s.client.close()
	s.p.sessions.Delete(s)
	s.p.metrics.connClosed(s.route)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		s.log.Info("connection closed", "reason", err)
	}
}
