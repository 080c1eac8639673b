package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
)

// TLS listeners use crypto/tls (gnet has no TLS) with one reader goroutine per connection.
// They feed the same session core as gnet: frames in, frames out.

type tlsListener struct {
	ln   net.Listener
	done chan struct{}
}

func (l *tlsListener) addr() net.Addr { return l.ln.Addr() }

func (l *tlsListener) stop(ctx context.Context) error {
	err := l.ln.Close()
	select {
	case <-l.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (p *Proxy) serverTLSConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(p.cfg.TLS.CertFile, p.cfg.TLS.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading tls cert_file/key_file: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if p.cfg.TLS.ClientCAFile != "" {
		pem, err := os.ReadFile(p.cfg.TLS.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("reading tls client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls client_ca_file %s holds no PEM certificate", p.cfg.TLS.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

func (p *Proxy) listenTLS(r route, addr string) (listener, error) {
	cfg, err := p.serverTLSConfig()
	if err != nil {
		return nil, err
	}
	raw, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if p.cfg.ProxyProtocol {
		raw = proxyProtoListener{raw} // the PROXY header precedes the TLS handshake
	}
	return p.serveListener(r, tls.NewListener(raw, cfg), func(c net.Conn) { p.serveTLSConn(r, c.(*tls.Conn)) }), nil
}

// serveTLSConn reads frames until the connection ends; acquire blocks while every in-flight
// slot is taken, so the socket is not read and TCP pushes back on the client.
func (p *Proxy) serveTLSConn(r route, c *tls.Conn) {
	defer p.wg.Done()
	tc := &tlsClient{c: c}
	s := p.newSession(r, tc)
	hctx, cancel := context.WithTimeout(s.ctx, p.cfg.DialTimeout)
	err := c.HandshakeContext(hctx)
	cancel()
	if err != nil {
		s.closeWith(fmt.Errorf("tls handshake: %w", err))
		return
	}
	if certs := c.ConnectionState().PeerCertificates; len(certs) > 0 {
		s.auth.certPrincipal = certPrincipal(certs[0])
	}
	br := bufio.NewReaderSize(c, 64<<10)
	for {
		if p.draining.Load() {
			<-s.ctx.Done()
			return
		}
		frame, err := readFrame(br, p.cfg.MaxFrameBytes)
		if err != nil {
			s.closeWith(fmt.Errorf("reading request: %w", err))
			return
		}
		if !s.acquire() {
			return
		}
		if err := s.dispatch(frame); err != nil {
			s.closeWith(err)
			return
		}
	}
}

type tlsClient struct {
	mu       sync.Mutex
	c        *tls.Conn
	deadline writeDeadline // under mu
}

func (t *tlsClient) writeFrame(frame []byte) {
	t.mu.Lock()
	err := writeResponse(t.c, &t.deadline, frame)
	t.mu.Unlock()
	if err != nil {
		_ = t.c.Close()
	}
}

func (t *tlsClient) relay(head []byte, src io.Reader, n int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return relayTo(t.c, &t.deadline, head, src, n)
}

func (t *tlsClient) resume()              {}
func (t *tlsClient) close()               { _ = t.c.Close() }
func (t *tlsClient) remoteAddr() net.Addr { return t.c.RemoteAddr() }

// certPrincipal names a client certificate as Kafka's default principal builder does:
// "User:" and the subject's distinguished name (RFC 2253, e.g. "User:CN=ops,O=Example").
func certPrincipal(cert *x509.Certificate) string {
	return "User:" + cert.Subject.String()
}
