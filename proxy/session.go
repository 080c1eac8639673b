package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Concurrency map of one client connection (a session):
//
//   - The client side delivers frames to dispatch from exactly one goroutine at a time:
//     the gnet event loop that owns the connection (OnTraffic), or the TLS reader goroutine.
//   - The upstream writer goroutine dials the broker, then writes forwarded frames in order.
//   - The upstream reader goroutine owns the response FIFO: it pops pending entries in request
//     order, reads the matching response from the broker (or waits for a local answer),
//     rewrites it if its key carries broker addresses, and writes it to the client.
//
// slots is the in-flight semaphore shared by those goroutines: one token per request that
// still owes the client a response, plus one per acks=0 Produce not yet written upstream.
// With every slot taken the client side stops reading, so buffering per connection is bounded
// by MaxInFlight frames. fifo and toUpstream have MaxInFlight capacity, so sends on them never
// block once a slot is held.
//
// Nothing is shared between sessions except the Proxy's broker table and metrics.

// clientSide is the transport to the client: gnet (plaintext) or a net.Conn (TLS).
type clientSide interface {
	// writeFrame sends one response frame; done runs once the frame has left the
	// session's hands (written or buffered by the transport, or failed).
	writeFrame(frame []byte, done func())
	// resume restarts reading after the session stopped for lack of slots.
	resume()
	close()
	remoteAddr() net.Addr
}

// route says which upstream broker a listener leads to.
type route struct {
	bootstrap bool
	node      int32
}

func (r route) String() string {
	if r.bootstrap {
		return "bootstrap"
	}
	return fmt.Sprintf("broker-%d", r.node)
}

// pending is one request that owes the client a response.
type pending struct {
	key, version int16
	corrID       int32
	start        time.Time
	local        chan []byte // non-nil: answered by the proxy itself (a complete frame)
}

// outbound is one frame to forward upstream.
type outbound struct {
	frame      []byte
	noResponse bool // acks=0 Produce: the broker sends nothing back
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

	lastActive atomic.Int64 // unix nanos of the last request or response

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
		fifo:       make(chan *pending, p.cfg.MaxInFlight),
		toUpstream: make(chan outbound, p.cfg.MaxInFlight),
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

// acquire takes an in-flight slot, blocking (TLS path: true TCP backpressure).
func (s *session) acquire() bool {
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

	if local, err := s.p.answerLocally(s, h, frame); err != nil {
		s.release()
		s.p.metrics.requestError(h.key)
		return err
	} else if local != nil {
		p.local = local
		s.fifo <- p
		return nil
	}
	if h.key == 0 {
		acks, err := produceAcks(frame[4+h.bodyOff:], h.version, h.flexible)
		if err != nil {
			s.release()
			s.p.metrics.requestError(h.key)
			return fmt.Errorf("malformed Produce request: %w", err)
		}
		if acks == 0 {
			s.toUpstream <- outbound{frame: frame, noResponse: true}
			return nil
		}
	}
	// The FIFO entry goes first so the reader expects the response before it can arrive.
	s.fifo <- p
	s.toUpstream <- outbound{frame: frame}
	return nil
}

// runUpstreamWriter dials the broker, starts the reader, and forwards frames in order,
// batching whatever is queued into one writev.
func (s *session) runUpstreamWriter() {
	defer s.p.wg.Done()
	conn, err := s.p.dialUpstream(s.ctx, s.route)
	if err != nil {
		s.closeWith(fmt.Errorf("connecting upstream for %s: %w", s.route, err))
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = conn.Close()
		return
	}
	s.upstream = conn
	s.mu.Unlock()

	s.p.wg.Add(1)
	go s.runUpstreamReader(conn)

	var batch, frames net.Buffers
	var acks0 int
	for {
		var ob outbound
		select {
		case <-s.ctx.Done():
			return
		case ob = <-s.toUpstream:
		}
		batch, acks0 = batch[:0], 0
		add := func(ob outbound) {
			batch = append(batch, ob.frame)
			if ob.noResponse {
				acks0++
			}
		}
		add(ob)
	drain:
		for len(batch) < 64 {
			select {
			case ob = <-s.toUpstream:
				add(ob)
			default:
				break drain
			}
		}
		frames = append(frames[:0], batch...) // WriteTo consumes batch
		if _, err := batch.WriteTo(conn); err != nil {
			s.closeWith(fmt.Errorf("writing to upstream %s: %w", conn.RemoteAddr(), err))
			return
		}
		for i, f := range frames {
			putFrame(f)
			frames[i] = nil
		}
		for range acks0 {
			s.release()
		}
	}
}

// runUpstreamReader delivers responses to the client in request order.
func (s *session) runUpstreamReader(conn net.Conn) {
	defer s.p.wg.Done()
	br := bufio.NewReaderSize(conn, 64<<10)
	for {
		var p *pending
		select {
		case <-s.ctx.Done():
			return
		case p = <-s.fifo:
		}
		var frame []byte
		if p.local != nil {
			select {
			case <-s.ctx.Done():
				return
			case frame = <-p.local:
			}
		} else {
			var err error
			frame, err = readFrame(br, s.p.cfg.MaxFrameBytes)
			if err != nil {
				if s.ctx.Err() != nil {
					return // the client went away first: the request was abandoned, not failed
				}
				if errors.Is(err, io.EOF) {
					err = fmt.Errorf("upstream %s closed the connection: %w", conn.RemoteAddr(), err)
				}
				s.p.metrics.requestError(p.key)
				s.closeWith(err)
				return
			}
			var rewritten []byte
			rewritten, err = s.p.rewriteResponse(p, frame)
			if err == nil && &rewritten[0] != &frame[0] {
				putFrame(frame) // the rewrite copied everything it needs
				frame = rewritten
			}
			if err != nil {
				s.p.metrics.requestError(p.key)
				s.closeWith(err)
				return
			}
		}
		s.touch()
		s.p.metrics.response(p.key, len(frame), time.Since(p.start))
		if hook := s.p.testHookClientFrame; hook != nil {
			hook(frame)
		}
		pooled := p.local == nil
		s.client.writeFrame(frame, func() {
			if pooled {
				putFrame(frame)
			}
			s.release()
		})
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
