package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// PROXY protocol (HAProxy's, versions 1 and 2) on the client listeners when proxy_protocol is
// set (docs/deploy.md). A load balancer in TCP mode puts one header in front of every
// connection it opens to kmirror, naming the client it accepted the connection from; kmirror
// takes that address for the session (logs, the audit line, authorisation and SASL context)
// and removes the header, so it never reaches a broker. A connection without a valid header is
// refused: on such a listener a client that connects directly would otherwise be logged and
// authorised under an address nobody can check.
//
// The parser works on bytes rather than on a reader (github.com/pires/go-proxyproto reads from
// a bufio.Reader and blocks for more): gnet hands the connection's bytes to OnTraffic as they
// arrive, and a header split over two reads must wait for the rest without blocking the event
// loop. parseProxyHeader tells "need more bytes" (errProxyIncomplete) from "not a header".

// proxyHeaderTimeout bounds how long a connection may take to send its PROXY header; a
// balancer sends it with the connection's first bytes. A variable for tests only.
var proxyHeaderTimeout = 10 * time.Second

// proxyV2MaxBody bounds a v2 header's address and TLV part. The format allows 65535 bytes;
// HAProxy's largest (with every TLV) is well under 1 KiB, and a bound keeps an unauthenticated
// peer from making kmirror buffer 64 KiB per connection before it says anything.
const proxyV2MaxBody = 4096

var (
	proxyV1Prefix = []byte("PROXY ")
	proxyV2Sig    = []byte("\r\n\r\n\x00\r\nQUIT\n")

	errProxyIncomplete = errors.New("PROXY protocol header incomplete")
	errNoProxyHeader   = errors.New("no PROXY protocol header (the listener has proxy_protocol set: connect through the load balancer)")
)

// proxyV1MaxLen is the longest v1 header the specification allows, CRLF included.
const proxyV1MaxLen = 107

// parseProxyHeader parses the PROXY protocol header at the start of b. It returns the client
// address the header names (nil when the sender names none: v1 UNKNOWN, v2 LOCAL or an address
// family other than TCP over IPv4/IPv6; the connection's own peer address stands), and the
// header's length in bytes. errProxyIncomplete means b is a prefix of a header that may still
// be valid: call again with more bytes.
func parseProxyHeader(b []byte) (net.Addr, int, error) {
	switch {
	case hasPrefixOrIsPrefix(b, proxyV2Sig):
		if len(b) < len(proxyV2Sig) {
			return nil, 0, errProxyIncomplete
		}
		return parseProxyV2(b)
	case hasPrefixOrIsPrefix(b, proxyV1Prefix):
		if len(b) < len(proxyV1Prefix) {
			return nil, 0, errProxyIncomplete
		}
		return parseProxyV1(b)
	}
	return nil, 0, errNoProxyHeader
}

// hasPrefixOrIsPrefix reports whether b starts with p, or is a (possibly empty) start of p.
func hasPrefixOrIsPrefix(b, p []byte) bool {
	n := min(len(b), len(p))
	return bytes.Equal(b[:n], p[:n])
}

// parseProxyV1 parses "PROXY TCP4|TCP6 SRC DST SPORT DPORT\r\n" or "PROXY UNKNOWN ...\r\n".
func parseProxyV1(b []byte) (net.Addr, int, error) {
	end := bytes.Index(b[:min(len(b), proxyV1MaxLen)], []byte("\r\n"))
	if end < 0 {
		if len(b) >= proxyV1MaxLen {
			return nil, 0, fmt.Errorf("PROXY v1 header: no CRLF within %d bytes", proxyV1MaxLen)
		}
		return nil, 0, errProxyIncomplete
	}
	n := end + 2
	fields := bytes.Split(b[len(proxyV1Prefix):end], []byte(" "))
	if string(fields[0]) == "UNKNOWN" {
		return nil, n, nil // the sender does not know the client: the peer address stands
	}
	if len(fields) != 5 {
		return nil, 0, fmt.Errorf("PROXY v1 header %q: want PROXY TCP4|TCP6 SRC DST SPORT DPORT", b[:end])
	}
	src, err := proxyV1Addr(string(fields[0]), string(fields[1]), string(fields[3]))
	if err != nil {
		return nil, 0, fmt.Errorf("PROXY v1 header %q: %w", b[:end], err)
	}
	if _, err := proxyV1Addr(string(fields[0]), string(fields[2]), string(fields[4])); err != nil {
		return nil, 0, fmt.Errorf("PROXY v1 header %q: destination: %w", b[:end], err)
	}
	return src, n, nil
}

func proxyV1Addr(proto, host, port string) (*net.TCPAddr, error) {
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("%q is not an IP address", host)
	}
	var match bool
	switch proto {
	case "TCP4":
		match = ip.To4() != nil && !strings.Contains(host, ":")
	case "TCP6":
		match = strings.Contains(host, ":")
	default:
		return nil, fmt.Errorf("protocol %q: want TCP4, TCP6 or UNKNOWN", proto)
	}
	if !match {
		return nil, fmt.Errorf("address %q is not a %s address", host, proto)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || (len(port) > 1 && port[0] == '0') {
		return nil, fmt.Errorf("port %q is not a number in 0..65535", port)
	}
	return &net.TCPAddr{IP: ip, Port: int(p)}, nil
}

// parseProxyV2 parses the binary header: signature, version and command, family and
// transport, body length, addresses, TLVs (skipped: kmirror needs only the address).
func parseProxyV2(b []byte) (net.Addr, int, error) {
	const fixed = 16
	if len(b) < fixed {
		return nil, 0, errProxyIncomplete
	}
	verCmd, fam := b[12], b[13]
	bodyLen := int(binary.BigEndian.Uint16(b[14:16]))
	if verCmd>>4 != 2 {
		return nil, 0, fmt.Errorf("PROXY v2 header: version %d, want 2", verCmd>>4)
	}
	if bodyLen > proxyV2MaxBody {
		return nil, 0, fmt.Errorf("PROXY v2 header: %d-byte body, limit %d", bodyLen, proxyV2MaxBody)
	}
	if len(b) < fixed+bodyLen {
		return nil, 0, errProxyIncomplete
	}
	n, body := fixed+bodyLen, b[fixed:fixed+bodyLen]
	switch verCmd & 0xf {
	case 0: // LOCAL: the balancer's own connection (a health check); the peer address stands
		return nil, n, nil
	case 1: // PROXY
	default:
		return nil, 0, fmt.Errorf("PROXY v2 header: unknown command %d", verCmd&0xf)
	}
	var ipLen int
	switch fam {
	case 0x11: // TCP over IPv4
		ipLen = 4
	case 0x21: // TCP over IPv6
		ipLen = 16
	default: // UNSPEC, UDP, unix sockets: no TCP client address to take
		return nil, n, nil
	}
	if len(body) < 2*ipLen+4 {
		return nil, 0, fmt.Errorf("PROXY v2 header: %d-byte body too short for family %#x", len(body), fam)
	}
	ip := net.IP(bytes.Clone(body[:ipLen]))
	port := binary.BigEndian.Uint16(body[2*ipLen:])
	return &net.TCPAddr{IP: ip, Port: int(port)}, n, nil
}

// proxyHeaderWait is a gnet connection's context until its PROXY header has arrived.
type proxyHeaderWait struct {
	settled atomic.Bool // the header arrived, or the timeout closed the connection
	timer   *time.Timer
}

// awaitProxyHeader makes a new gnet connection wait for its PROXY header (OnTraffic takes it,
// takeProxyHeader); a connection that does not send one in time is closed.
func (h *gnetHandler) awaitProxyHeader(c gnet.Conn) gnet.Action {
	w := &proxyHeaderWait{}
	peer, lis := c.RemoteAddr().String(), h.route.String()
	w.timer = time.AfterFunc(proxyHeaderTimeout, func() {
		if w.settled.CompareAndSwap(false, true) {
			h.p.log.Warn("refusing a connection: no PROXY protocol header within the timeout",
				"listener", lis, "peer", peer, "timeout", proxyHeaderTimeout)
			_ = c.Close()
		}
	})
	c.SetContext(w)
	return gnet.None
}

// closed settles a connection that closed before its header arrived: no timeout to report.
func (w *proxyHeaderWait) closed() {
	if w.settled.CompareAndSwap(false, true) {
		w.timer.Stop()
	}
}

// takeProxyHeader consumes the PROXY header from c's first bytes and opens the session under
// the client address it names. It returns the session, or nil and what gnet is to do: wait
// for more bytes, or close a connection whose bytes are not a header.
func (h *gnetHandler) takeProxyHeader(c gnet.Conn) (*session, gnet.Action) {
	w, ok := c.Context().(*proxyHeaderWait)
	if !ok {
		return nil, gnet.Close
	}
	buf, _ := c.Peek(c.InboundBuffered())
	src, n, err := parseProxyHeader(buf)
	if errors.Is(err, errProxyIncomplete) {
		return nil, gnet.None
	}
	if !w.settled.CompareAndSwap(false, true) {
		return nil, gnet.Close // the timeout closed it meanwhile
	}
	w.timer.Stop()
	if err != nil {
		h.p.log.Warn("refusing a connection without a valid PROXY protocol header", "listener", h.route.String(),
			"peer", c.RemoteAddr().String(), "err", err)
		return nil, gnet.Close
	}
	_, _ = c.Discard(n)
	if src == nil {
		src = c.RemoteAddr()
	}
	if action := h.open(c, src); action != gnet.None {
		return nil, action
	}
	return c.Context().(*session), gnet.None
}

// readProxyHeader reads the PROXY header at the start of a netpoll connection (plaintext_engine:
// netpoll), on the connection's own goroutine. It returns the client address (the header's,
// or the peer's when the header names none) and the bytes read past the header, which the
// session takes as the start of the client's requests.
func readProxyHeader(c *net.TCPConn) (net.Addr, []byte, error) {
	pc := &proxyProtoConn{Conn: c}
	pc.readHeader()
	if pc.err != nil {
		return nil, nil, pc.err
	}
	rest, _ := pc.br.Peek(pc.br.Buffered())
	return pc.remote, bytes.Clone(rest), nil
}

// proxyProtoListener reads the PROXY header of every connection it accepts (the TLS listener:
// the header precedes the TLS handshake). The header is read on the connection's own
// goroutine, at its first Read or RemoteAddr, so a slow peer never holds up Accept.
type proxyProtoListener struct {
	net.Listener
}

func (l proxyProtoListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &proxyProtoConn{Conn: c}, nil
}

// proxyProtoConn is a connection whose first bytes are a PROXY header.
type proxyProtoConn struct {
	net.Conn
	once   sync.Once
	br     *bufio.Reader
	remote net.Addr
	err    error // the header is missing or invalid: every Read fails with it
}

func (c *proxyProtoConn) readHeader() {
	c.once.Do(func() {
		c.remote = c.Conn.RemoteAddr()
		c.br = bufio.NewReaderSize(c.Conn, len(proxyV2Sig)+4+proxyV2MaxBody)
		_ = c.Conn.SetReadDeadline(time.Now().Add(proxyHeaderTimeout))
		defer func() { _ = c.Conn.SetReadDeadline(time.Time{}) }()
		for want := 1; ; want++ {
			buf, perr := c.br.Peek(want)
			src, n, err := parseProxyHeader(buf)
			if errors.Is(err, errProxyIncomplete) && perr == nil {
				continue
			}
			if err == nil {
				_, _ = c.br.Discard(n)
				if src != nil {
					c.remote = src
				}
				return
			}
			if errors.Is(err, errProxyIncomplete) {
				err = fmt.Errorf("%w: %w", err, perr)
			}
			c.err = fmt.Errorf("refusing a connection from %s without a valid PROXY protocol header: %w", c.remote, err)
			return
		}
	})
}

func (c *proxyProtoConn) Read(p []byte) (int, error) {
	c.readHeader()
	if c.err != nil {
		return 0, c.err
	}
	return c.br.Read(p)
}

func (c *proxyProtoConn) RemoteAddr() net.Addr {
	c.readHeader()
	return c.remote
}
