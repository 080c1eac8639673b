package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// Plaintext listeners run on gnet event loops: one engine per listener (a broker listener
// can start at any time, and gnet engines cannot add listeners once running).
//
// Backpressure: gnet always drains the socket into its inbound buffer, so "stop reading" here
// means stop taking frames out of that buffer once every in-flight slot is taken; the slot's
// release Wakes the connection. A client that keeps sending regardless (never reading its
// responses) is closed when its unprocessed bytes exceed maxBufferedBytes, which keeps the
// memory of one connection bounded. The TLS path (listener_tls.go) blocks the socket read
// instead, which is true TCP backpressure.

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
	gc := &gnetClient{c: c, remote: c.RemoteAddr(), maxOwed: maxBufferedBytes(h.p.cfg)}
	s := h.p.newSession(h.route, gc)
	gc.overflow = func(owed int) {
		s.closeWith(fmt.Errorf("client left %d bytes of responses unread", owed))
	}
	c.SetContext(s)
	return nil, gnet.None
}

func (h *gnetHandler) OnClose(c gnet.Conn, err error) gnet.Action {
	if s, ok := c.Context().(*session); ok {
		if err == nil {
			err = errClientClosed
		}
		s.closeWith(err)
	}
	return gnet.None
}

var errClientClosed = net.ErrClosed

func (h *gnetHandler) OnTraffic(c gnet.Conn) gnet.Action {
	s, ok := c.Context().(*session)
	if !ok {
		return gnet.Close
	}
	maxFrame := int(h.p.cfg.MaxFrameBytes)
	for !h.p.draining.Load() {
		n := c.InboundBuffered()
		if n < 4 {
			return gnet.None
		}
		hdr, err := c.Peek(4)
		if err != nil {
			return gnet.None
		}
		size := int(int32(binary.BigEndian.Uint32(hdr)))
		if size < 0 || size > maxFrame {
			s.closeWith(fmt.Errorf("%w: size %d, limit %d", errFrameTooLarge, size, maxFrame))
			return gnet.Close
		}
		if n < 4+size {
			return gnet.None
		}
		if !s.tryAcquire() {
			s.paused.Store(true)
			if !s.tryAcquire() {
				if n > maxBufferedBytes(h.p.cfg) {
					s.closeWith(fmt.Errorf("client sent %d unprocessed bytes while %d requests were in flight", n, s.inFlight()))
					return gnet.Close
				}
				return gnet.None
			}
			s.paused.Store(false)
		}
		frame := getFrame(4 + size)
		if _, err := c.Read(frame); err != nil {
			s.release()
			putFrame(frame)
			return gnet.None
		}
		if err := s.dispatch(frame); err != nil {
			s.closeWith(err)
			return gnet.Close
		}
	}
	return gnet.None
}

// maxBufferedBytes is what a gnet connection may accumulate in either direction (requests
// not yet taken, responses not yet read) before it is treated as hostile: two maximal frames,
// and never less than 64 MiB.
func maxBufferedBytes(cfg Config) int {
	return max(2*int(cfg.MaxFrameBytes)+8, 64<<20)
}

type gnetClient struct {
	c        gnet.Conn
	remote   net.Addr
	maxOwed  int
	overflow func(owed int)
}

func (g *gnetClient) writeFrame(frame []byte, done func()) {
	err := g.c.AsyncWrite(frame, func(c gnet.Conn, _ error) error {
		// gnet copies what the socket does not take into the connection's outbound buffer.
		// A client that keeps sending but stops reading would grow it without bound; past
		// maxOwed bytes it is closed (a client that reads never gets near: it has at most
		// MaxInFlight responses outstanding).
		if owed := c.OutboundBuffered(); owed > g.maxOwed {
			g.overflow(owed)
		}
		done()
		return nil
	})
	if err != nil {
		done()
	}
}

func (g *gnetClient) resume()              { _ = g.c.Wake(nil) }
func (g *gnetClient) close()               { _ = g.c.Close() }
func (g *gnetClient) remoteAddr() net.Addr { return g.remote }

// gnetLogger routes gnet's own logging into slog.
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) Debugf(f string, a ...any) { g.l.Debug(fmt.Sprintf(f, a...), "source", "gnet") }
func (g gnetLogger) Infof(f string, a ...any)  { g.l.Debug(fmt.Sprintf(f, a...), "source", "gnet") }
func (g gnetLogger) Warnf(f string, a ...any)  { g.l.Warn(fmt.Sprintf(f, a...), "source", "gnet") }
func (g gnetLogger) Errorf(f string, a ...any) { g.l.Error(fmt.Sprintf(f, a...), "source", "gnet") }
func (g gnetLogger) Fatalf(f string, a ...any) { g.l.Error(fmt.Sprintf(f, a...), "source", "gnet") }
