package proxy

import (
	"errors"
	"io"
	"net"
)

// Plaintext listeners on Go's own netpoller (plaintext_engine: netpoll, the default since
// 2026-12-08): one goroutine per connection reads its requests with blocking reads
// (serveBulk: small requests whole, the body of a large Produce spliced socket to socket) and
// the session's reader goroutine writes the responses, so each direction is one goroutine as
// in a splicing byte relay.
//
// Why not gnet (listener_gnet.go, plaintext_engine: gnet, still selectable): gnet's event
// loops wait in epoll_wait as blocking system calls of their own, beside the runtime's
// netpoller, which the session's upstream goroutines use anyway. Every request then wakes two
// pollers; a loop that finds nothing more yields (runtime.Gosched) before it blocks again;
// and a loop blocked in epoll_wait for 10 ms has its P taken by sysmon, which resets sysmon to
// its fastest polling. Measured side by side in one run (bench/README.md, Proxy,
// 2026-12-08), gnet cost 1.27× the relay's CPU per GiB consumed with small records where
// netpoll cost 1.05×, and added 365 µs p99 to netpoll's 147. With one poller a request
// wakes one goroutine, and a client that stops reading is not read from (TCP pushes back, as
// on the TLS path).

// Plaintext engines (Config.PlaintextEngine).
const (
	EngineNetpoll = "netpoll"
	EngineGnet    = "gnet"
)

// listenPlain starts a plaintext listener on the configured engine.
func (p *Proxy) listenPlain(r route, addr string) (listener, error) {
	if p.cfg.PlaintextEngine == EngineGnet {
		return p.listenGnet(r, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return p.serveListener(r, ln, func(c net.Conn) {
		tc := c.(*net.TCPConn)
		remote, prefix := tc.RemoteAddr(), []byte(nil)
		if p.cfg.ProxyProtocol {
			var err error
			if remote, prefix, err = readProxyHeader(tc); err != nil {
				p.log.Warn("refusing a connection without a valid PROXY protocol header", "listener", r.String(),
					"peer", tc.RemoteAddr().String(), "err", err)
				_ = tc.Close()
				p.wg.Done()
				return
			}
		}
		s := p.newSession(r, &tcpClient{c: tc, remote: remote})
		s.serveBulk(tc, prefix) // done with p.wg
	}), nil
}

// tcpClient is the client side of a netpoll connection: responses are written by the
// session's reader goroutine, the only writer.
type tcpClient struct {
	c        *net.TCPConn
	remote   net.Addr      // the client: the peer, or whom its PROXY header names
	deadline writeDeadline // armed only by the session's reader
}

func (t *tcpClient) writeFrame(frame []byte) {
	if err := writeResponse(t.c, &t.deadline, frame); err != nil {
		_ = t.c.Close()
	}
}

func (t *tcpClient) relay(head []byte, src io.Reader, n int64) error {
	return relayTo(t.c, &t.deadline, head, src, n)
}

func (t *tcpClient) resume()              {} // serveBulk blocks for a slot instead of pausing
func (t *tcpClient) close()               { _ = t.c.Close() }
func (t *tcpClient) remoteAddr() net.Addr { return t.remote }

// writeResponse writes one response frame to a client socket with a blocking write.
func writeResponse(out net.Conn, d *writeDeadline, frame []byte) error {
	d.arm(out)
	_, err := out.Write(frame)
	return err
}

// relayTo writes head, then n bytes read from src (*net.TCPConn to *net.TCPConn through
// io.LimitedReader: the runtime splices).
func relayTo(out net.Conn, d *writeDeadline, head []byte, src io.Reader, n int64) error {
	d.arm(out)
	if _, err := out.Write(head); err != nil {
		return err
	}
	_, err := io.CopyN(out, src, n)
	return err
}

// serveListener accepts connections on ln until it is closed, each served by serve on a
// goroutine of its own counted in p.wg (serve must call p.wg.Done). While the proxy drains,
// new connections are closed at once.
func (p *Proxy) serveListener(r route, ln net.Listener, serve func(net.Conn)) *tlsListener {
	l := &tlsListener{ln: ln, done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(l.done)
		for {
			c, err := l.ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					p.log.Error("accept failed; listener stops", "listener", r.String(), "err", err)
				}
				return
			}
			if p.draining.Load() {
				_ = c.Close()
				continue
			}
			p.wg.Add(1)
			go serve(c)
		}
	}()
	return l
}
