package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// With plaintext_engine: gnet (listener_tcp.go says why it is no longer the default),
// plaintext listeners run on gnet event loops: one engine per listener (a broker listener
// can start at any time, and gnet engines cannot add listeners once running).
//
// Backpressure: gnet always drains the socket into its inbound buffer, so "stop reading" here
// means stop taking frames out of that buffer once every in-flight slot is taken; the slot's
// release Wakes the connection. A client that keeps sending regardless is closed when its
// unprocessed bytes exceed maxBufferedBytes, which keeps the memory of one connection
// bounded. Responses bypass gnet (see responseConn): they are written with blocking writes,
// so a client that does not read keeps its slots and is not read from either. The TLS path
// (listener_tls.go) blocks the socket read itself, which is plain TCP backpressure.

type gnetListener struct {
	eng    gnet.Engine
	bound  net.Addr
	done   chan error
	booted chan struct{}
}

func (l *gnetListener) addr() net.Addr { return l.bound }

func (l *gnetListener) stop(ctx context.Context) error {
	if err := l.eng.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	select {
	case err := <-l.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

type gnetHandler struct {
	gnet.BuiltinEventEngine
	p     *Proxy
	route route
	ln    *gnetListener
}

func (p *Proxy) listenGnet(r route, addr string) (listener, error) {
	ln := &gnetListener{done: make(chan error, 1), booted: make(chan struct{})}
	h := &gnetHandler{p: p, route: r, ln: ln}
	go func() {
		ln.done <- gnet.Run(h, "tcp://"+addr,
			gnet.WithNumEventLoop(p.cfg.EventLoops),
			gnet.WithTCPNoDelay(gnet.TCPNoDelay),
			// Produce requests of a MiB and more are common: read them in few syscalls.
			gnet.WithReadBufferCap(1<<20),
			gnet.WithReuseAddr(true),
			gnet.WithLogger(gnetLogger{p.log}),
		)
	}()
	select {
	case <-ln.booted:
		return ln, nil
	case err := <-ln.done:
		if err == nil {
			err = errors.New("gnet engine stopped before it booted")
		}
		return nil, err
	case <-time.After(10 * time.Second):
		return nil, errors.New("gnet engine did not boot within 10s")
	}
}

func (h *gnetHandler) OnBoot(eng gnet.Engine) gnet.Action {
	h.ln.eng = eng
	addr, err := engineAddr(eng)
	if err != nil {
		h.p.log.Error("cannot read listener address", "err", err)
		return gnet.Shutdown
	}
	h.ln.bound = addr
	close(h.ln.booted)
	return gnet.None
}

// engineAddr reads the bound address from a duplicate of the engine's listening socket:
// needed for port 0, which gnet does not report back.
func engineAddr(eng gnet.Engine) (net.Addr, error) {
	fd, err := eng.Dup()
	if err != nil {
		return nil, fmt.Errorf("dup listener fd: %w", err)
	}
	defer unix.Close(fd)
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil, fmt.Errorf("getsockname: %w", err)
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}, nil
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}, nil
	}
	return nil, fmt.Errorf("unexpected listener address type %T", sa)
}

func (h *gnetHandler) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	if h.p.draining.Load() {
		return nil, gnet.Close
	}
	if h.p.cfg.ProxyProtocol {
		return nil, h.awaitProxyHeader(c) // proxyproto.go: the session opens with the header
	}
	return nil, h.open(c, c.RemoteAddr())
}

// open starts the session of a client connection whose client address is remote.
func (h *gnetHandler) open(c gnet.Conn, remote net.Addr) gnet.Action {
	out, err := responseConn(c)
	if err != nil {
		h.p.log.Error("cannot set up the response path of a client connection; closing it", "client", remote.String(), "err", err)
		return gnet.Close
	}
	s := h.p.newSession(h.route, &gnetClient{c: c, out: out, remote: remote})
	c.SetContext(s)
	return gnet.None // a route not yet open holds it unread (OnTraffic, runUpstreamWriter)
}

// responseConn returns a net.Conn on a duplicate of the client socket for writing responses.
//
// Responses do not go through gnet: AsyncWrite wakes the event loop for every write and
// copies whatever the socket does not take at once into an unbounded per-connection buffer.
// The session's reader goroutine writes through Go's own poller instead, blocking while the
// client is slow, so a response is never buffered twice and a client that stops reading
// holds its in-flight slots, which stops the proxy reading its requests (backpressure).
// gnet never writes to the socket (the proxy never calls its write methods), so there is a
// single writer. The duplicate keeps the socket alive until the session closes it, so a
// descriptor number gnet closes and the kernel reuses is never written to.
func responseConn(c gnet.Conn) (net.Conn, error) {
	fd, err := c.Dup()
	if err != nil {
		return nil, fmt.Errorf("dup client socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "client")
	defer f.Close() // FileConn holds its own duplicate
	nc, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("client socket as net.Conn: %w", err)
	}
	return nc, nil
}

func (h *gnetHandler) OnClose(c gnet.Conn, err error) gnet.Action {
	if s, ok := c.Context().(*session); ok {
		if err == nil {
			err = errClientClosed
		}
		s.closeWith(err)
	} else if w, ok := c.Context().(*proxyHeaderWait); ok {
		w.closed() // proxyproto.go: closed before its header
	}
	return gnet.None
}

var errClientClosed = net.ErrClosed

// OnTraffic takes every request the client's bytes complete, on the connection's event
// loop. It is the proxy's hot path: the helpers below take no lock, copy nothing and hand
// nothing to another goroutine beyond what a request needs.
func (h *gnetHandler) OnTraffic(c gnet.Conn) gnet.Action {
	s, ok := c.Context().(*session)
	if !ok {
		var action gnet.Action
		if s, action = h.takeProxyHeader(c); s == nil {
			return action
		}
	}
	for {
		if h.p.draining.Load() && s.streamLeft == 0 {
			return gnet.None // draining: finish a request being streamed, take no new one
		}
		if s.streamLeft > 0 {
			if !h.streamRest(c, s) {
				return gnet.None
			}
			continue
		}
		if more, action := h.takeRequest(c, s); !more {
			return action
		}
	}
}

// streamRest forwards what has arrived of a Produce request whose head already went
// upstream; it reports whether anything was taken.
func (h *gnetHandler) streamRest(c gnet.Conn, s *session) bool {
	n := min(c.InboundBuffered(), s.streamLeft)
	if n == 0 || !s.upstreamRoom() {
		return false
	}
	chunk := getFrame(n)
	if _, err := c.Read(chunk); err != nil {
		putFrame(chunk)
		return false
	}
	s.continueStream(chunk)
	return true
}

// takeRequest takes the next request off the connection: whole, or the head of a large
// Produce, which is streamed or handed off. It reports whether to look for another
// request, and else what gnet is to do with the connection.
func (h *gnetHandler) takeRequest(c gnet.Conn, s *session) (bool, gnet.Action) {
	n := c.InboundBuffered()
	if n < 4 {
		return false, gnet.None
	}
	hdr, err := c.Peek(4)
	if err != nil {
		return false, gnet.None
	}
	size := int(int32(binary.BigEndian.Uint32(hdr)))
	if maxFrame := int(h.p.cfg.MaxFrameBytes); size < 0 || size > maxFrame {
		s.closeWith(fmt.Errorf("%w: size %d, limit %d", errFrameTooLarge, size, maxFrame))
		return false, gnet.Close
	}
	head, acks, large, handedOff := h.largeProduce(c, s, n, size)
	switch {
	case handedOff:
		return false, gnet.Close // the session lives on in serveBulk
	case n < 4+size && !large:
		return false, gnet.None // not a large Produce, or unparseable yet: handled whole
	}
	if more, action := h.admit(s, n); !more {
		return false, action
	}
	if n < 4+size {
		chunk := getFrame(n)
		if _, err := c.Read(chunk); err != nil {
			s.release()
			putFrame(chunk)
			return false, gnet.None
		}
		s.startStream(head, acks, chunk, 4+size)
		return true, gnet.None
	}
	frame := getFrame(4 + size)
	if _, err := c.Read(frame); err != nil {
		s.release()
		putFrame(frame)
		return false, gnet.None
	}
	if err := s.dispatch(frame); err != nil {
		s.closeWith(err)
		return false, gnet.Close
	}
	return true, gnet.None
}

// largeProduce looks at the head of a request of streamMinBytes or more. A large Produce
// (not while topics are read-only: the guard must see every partition of a Produce before
// any of it is forwarded; nor when its head does not prove it stays off kmirror's
// internals) moves the connection to serveBulk, which splices it (bulk.go: handedOff);
// where that cannot be, it is forwarded as it arrives once its header and acks are in
// (cut-through: large): reading it whole first would serialise the client's transfer and
// the broker's. Anything else waits until complete.
func (h *gnetHandler) largeProduce(c gnet.Conn, s *session, n, size int) (head requestHeader, acks int16, large, handedOff bool) {
	if 4+size < streamMinBytes || n < min(4+size, streamHeadBytes) || h.p.guardActive() {
		return head, acks, false, false
	}
	peek, err := c.Peek(min(4+size, streamHeadBytes))
	if err != nil {
		return head, acks, false, false
	}
	if head, acks, err = produceHead(peek); err != nil || !h.p.largeProduceClear(head, peek) {
		return head, acks, false, false
	}
	if h.handOff(c, s) {
		return head, acks, false, true
	}
	return head, acks, true, false
}

// admit takes an in-flight slot and room in the writer's queue for the next request. At the
// limit the connection stops taking frames until a response frees a slot; a client that
// keeps sending regardless is closed once its unread bytes pass maxBufferedBytes.
func (h *gnetHandler) admit(s *session, n int) (bool, gnet.Action) {
	if !s.upstreamRoom() {
		return false, gnet.None
	}
	if s.tryAcquire() {
		return true, gnet.None
	}
	s.paused.Store(true)
	if !s.tryAcquire() {
		if n > maxBufferedBytes(h.p.cfg) {
			s.closeWith(fmt.Errorf("client sent %d unprocessed bytes while %d requests were in flight", n, s.inFlight()))
			return false, gnet.Close
		}
		return false, gnet.None
	}
	s.paused.Store(false)
	return true, gnet.None
}

// maxBufferedBytes is what a gnet connection may accumulate in requests not yet taken before
// it is treated as hostile: two maximal frames, and never less than 64 MiB.
func maxBufferedBytes(cfg Config) int {
	return max(2*int(cfg.MaxFrameBytes)+8, 64<<20)
}

type gnetClient struct {
	c      gnet.Conn
	out    net.Conn // duplicate of the client socket, written only by the session's reader
	remote net.Addr
	// handedOff: the connection left gnet (bulk.go); out is its only descriptor now.
	handedOff atomic.Bool
	deadline  writeDeadline // out's; armed only by the session's reader
}

func (g *gnetClient) writeFrame(frame []byte) {
	if err := writeResponse(g.out, &g.deadline, frame); err != nil {
		g.close()
	}
}

func (g *gnetClient) relay(head []byte, src io.Reader, n int64) error {
	return relayTo(g.out, &g.deadline, head, src, n)
}

func (g *gnetClient) resume() {
	if !g.handedOff.Load() {
		_ = g.c.Wake(nil)
	}
}

func (g *gnetClient) close() {
	if !g.handedOff.Load() {
		_ = g.c.Close()
	}
	_ = g.out.Close()
}
func (g *gnetClient) remoteAddr() net.Addr { return g.remote }

// gnetLogger routes gnet's own logging into slog.
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) Debugf(f string, a ...any) { g.l.Debug(fmt.Sprintf(f, a...), "source", "gnet") }
func (g gnetLogger) Infof(f string, a ...any)  { g.l.Debug(fmt.Sprintf(f, a...), "source", "gnet") }
func (g gnetLogger) Warnf(f string, a ...any)  { g.l.Warn(fmt.Sprintf(f, a...), "source", "gnet") }
func (g gnetLogger) Errorf(f string, a ...any) { g.l.Error(fmt.Sprintf(f, a...), "source", "gnet") }
func (g gnetLogger) Fatalf(f string, a ...any) { g.l.Error(fmt.Sprintf(f, a...), "source", "gnet") }
