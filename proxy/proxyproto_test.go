package proxy

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/audit"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

// proxyV2Header builds a v2 PROXY header for TCP from src to dst, with tlv appended.
func proxyV2Header(src, dst *net.TCPAddr, tlv []byte) []byte {
	b := append([]byte(nil), proxyV2Sig...)
	fam, ipLen := byte(0x11), 4
	if src.IP.To4() == nil {
		fam, ipLen = 0x21, 16
	}
	b = append(b, 0x21, fam, 0, 0)
	ip := func(a net.IP) []byte {
		if ipLen == 4 {
			return a.To4()
		}
		return a.To16()
	}
	body := append(append([]byte(nil), ip(src.IP)...), ip(dst.IP)...)
	body = binary.BigEndian.AppendUint16(body, uint16(src.Port))
	body = binary.BigEndian.AppendUint16(body, uint16(dst.Port))
	body = append(body, tlv...)
	binary.BigEndian.PutUint16(b[14:], uint16(len(body)))
	return append(b, body...)
}

func TestParseProxyHeader(t *testing.T) {
	v4 := &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7).To4(), Port: 4242}
	v6 := &net.TCPAddr{IP: net.ParseIP("2001:db8::7"), Port: 65535}
	dst := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1).To4(), Port: 9092}
	dst6 := &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 9092}
	local := append(append([]byte(nil), proxyV2Sig...), 0x20, 0x00, 0, 0)
	cases := []struct {
		name string
		in   string
		want string // client address; "" for none (the peer's stands)
		n    int    // header length
		err  string // substring; "incomplete" for errProxyIncomplete
	}{
		{name: "v1 tcp4", in: "PROXY TCP4 203.0.113.7 10.0.0.1 4242 9092\r\nkafka", want: "203.0.113.7:4242", n: 43},
		{name: "v1 tcp6", in: "PROXY TCP6 2001:db8::7 2001:db8::1 65535 9092\r\n", want: "[2001:db8::7]:65535", n: 47},
		{name: "v1 unknown", in: "PROXY UNKNOWN\r\n", n: 15},
		{name: "v1 unknown with addresses", in: "PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", n: 35},
		{name: "v2 tcp4 with TLV", in: string(proxyV2Header(v4, dst, []byte{0x04, 0, 1, 'x'})) + "kafka", want: "203.0.113.7:4242", n: 16 + 12 + 4},
		{name: "v2 tcp6", in: string(proxyV2Header(v6, dst6, nil)), want: "[2001:db8::7]:65535", n: 16 + 36},
		{name: "v2 local", in: string(local), n: 16},
		{name: "empty", in: "", err: "incomplete"},
		{name: "v1 prefix", in: "PROX", err: "incomplete"},
		{name: "v1 no CRLF yet", in: "PROXY TCP4 203.0.113.7 10.0", err: "incomplete"},
		{name: "v2 prefix", in: "\r\n\r\n\x00", err: "incomplete"},
		{name: "v2 body short", in: string(proxyV2Header(v4, dst, nil)[:20]), err: "incomplete"},
		{name: "kafka request", in: "\x00\x00\x00\x20\x00\x12", err: "no PROXY protocol header"},
		{name: "v1 bad ip", in: "PROXY TCP4 203.0.113.x 10.0.0.1 4242 9092\r\n", err: "not an IP address"},
		{name: "v1 family mismatch", in: "PROXY TCP4 2001:db8::7 10.0.0.1 4242 9092\r\n", err: "not a TCP4 address"},
		{name: "v1 bad port", in: "PROXY TCP4 203.0.113.7 10.0.0.1 70000 9092\r\n", err: "port"},
		{name: "v1 leading zero port", in: "PROXY TCP4 203.0.113.7 10.0.0.1 0442 9092\r\n", err: "port"},
		{name: "v1 bad dst", in: "PROXY TCP4 203.0.113.7 10.0.0.1 4242 x\r\n", err: "destination"},
		{name: "v1 fields", in: "PROXY TCP4 203.0.113.7\r\n", err: "want PROXY"},
		{name: "v1 protocol", in: "PROXY UDP4 203.0.113.7 10.0.0.1 4242 9092\r\n", err: "want TCP4"},
		{name: "v1 too long", in: "PROXY TCP4 " + strings.Repeat("1", 120), err: "no CRLF"},
		{name: "v2 version", in: string(append(append([]byte(nil), proxyV2Sig...), 0x11, 0x11, 0, 0)), err: "version 1"},
		{name: "v2 command", in: string(append(append([]byte(nil), proxyV2Sig...), 0x22, 0x11, 0, 0)), err: "unknown command"},
		{name: "v2 huge body", in: string(append(append([]byte(nil), proxyV2Sig...), 0x21, 0x11, 0xff, 0xff)), err: "limit"},
		{name: "v2 body too short for family", in: string(append(append([]byte(nil), proxyV2Sig...), 0x21, 0x11, 0, 2, 1, 2)), err: "too short"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			addr, n, err := parseProxyHeader([]byte(c.in))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one containing %q", err, c.err)
				}
				if (c.err == "incomplete") != errors.Is(err, errProxyIncomplete) {
					t.Fatalf("err = %v: errProxyIncomplete only for a header that may still complete", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if n != c.n {
				t.Errorf("header length %d, want %d", n, c.n)
			}
			got := ""
			if addr != nil {
				got = addr.String()
			}
			if got != c.want {
				t.Errorf("client address %q, want %q", got, c.want)
			}
		})
	}
}

// FuzzParseProxyHeader: any input gives an address and a length within it, "incomplete",
// or an error; never a panic. A complete header parses the same with bytes after it, and
// every strict prefix of it is incomplete (so a header split over reads waits, never fails).
func FuzzParseProxyHeader(f *testing.F) {
	f.Add([]byte("PROXY TCP4 203.0.113.7 10.0.0.1 4242 9092\r\n"))
	f.Add([]byte("PROXY TCP6 2001:db8::7 2001:db8::1 65535 9092\r\n"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(proxyV2Header(&net.TCPAddr{IP: net.IPv4(1, 2, 3, 4), Port: 5}, &net.TCPAddr{IP: net.IPv4(6, 7, 8, 9), Port: 10}, []byte{1, 0, 0}))
	f.Add(proxyV2Header(&net.TCPAddr{IP: net.ParseIP("::1"), Port: 5}, &net.TCPAddr{IP: net.ParseIP("::2"), Port: 10}, nil))
	f.Add([]byte("\x00\x00\x00\x10kafka"))
	f.Fuzz(func(t *testing.T, b []byte) {
		addr, n, err := parseProxyHeader(b)
		if err != nil {
			return
		}
		if n <= 0 || n > len(b) {
			t.Fatalf("header length %d outside the %d-byte input", n, len(b))
		}
		if tcp, ok := addr.(*net.TCPAddr); addr != nil && (!ok || tcp.IP == nil) {
			t.Fatalf("address %#v is not a TCP address", addr)
		}
		again, n2, err := parseProxyHeader(append(b[:n:n], "more bytes"...))
		if err != nil || n2 != n || (again == nil) != (addr == nil) || (addr != nil && again.String() != addr.String()) {
			t.Fatalf("with bytes after the header: %v %d %v, want %v %d", again, n2, err, addr, n)
		}
		for i := range n {
			if _, _, err := parseProxyHeader(b[:i]); !errors.Is(err, errProxyIncomplete) {
				t.Fatalf("prefix of %d bytes of a %d-byte header: %v, want incomplete", i, n, err)
			}
		}
	})
}

// proxyProtoFixture is a proxy with proxy_protocol set in front of kfake, answering mirror
// RPCs with canned responses, its audit lines collected.
func proxyProtoFixture(t *testing.T, mutate ...func(*Config)) (*Proxy, *syncBuffer) {
	t.Helper()
	c := startKfake(t, 1)
	buf := &syncBuffer{}
	p := startProxyWith(t, c.ListenAddrs(), []Option{WithAudit(audit.New(buf))},
		append([]func(*Config){func(cfg *Config) { cfg.ProxyProtocol = true }}, mutate...)...)
	registerCannedHandlers(p, &sync.Map{})
	return p, buf
}

// listMirrorsThrough sends header (when set), then ListMirrors and Metadata over conn, and
// checks both answers: the proxy took the header off (the broker parsed Metadata).
func listMirrorsThrough(t *testing.T, conn net.Conn, header []byte) {
	t.Helper()
	if _, err := conn.Write(header); err != nil {
		t.Fatal(err)
	}
	lm := protocol.NewPtrListMirrorsRequest()
	if resp := roundTrip(t, conn, lm, 1).(*protocol.ListMirrorsResponse); len(resp.Mirrors) != 1 {
		t.Fatalf("ListMirrors through the PROXY header: %+v", resp)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(9)
	if resp := roundTrip(t, conn, md, 2).(*kmsg.MetadataResponse); len(resp.Brokers) == 0 {
		t.Fatalf("Metadata through the PROXY header: no brokers in %+v", resp)
	}
}

// waitAuditClient polls the audit log for a line naming client.
func waitAuditClient(t *testing.T, buf *syncBuffer, client string) {
	t.Helper()
	polltest.Until(t, 10*time.Second, "an audit line with client "+client, func() bool {
		for _, e := range buf.events(t) {
			if e.Client == client {
				return true
			}
		}
		return false
	})
}

func TestProxyProtocolListener(t *testing.T) {
	forEachEngine(t, testProxyProtocolListener)
}

func testProxyProtocolListener(t *testing.T, engine string) {
	p, buf := proxyProtoFixture(t, func(cfg *Config) { cfg.PlaintextEngine = engine })
	dst := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9092}

	t.Run("v2 header: audit line names the client", func(t *testing.T) {
		src := &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 4242}
		listMirrorsThrough(t, rawDial(t, p.Addr()), proxyV2Header(src, dst, nil))
		waitAuditClient(t, buf, "203.0.113.7:4242")
	})
	t.Run("v1 header split over writes", func(t *testing.T) {
		conn := rawDial(t, p.Addr())
		if _, err := conn.Write([]byte("PROXY TCP6 2001:db8::9 ::1 ")); err != nil {
			t.Fatal(err)
		}
		listMirrorsThrough(t, conn, []byte("5555 9092\r\n"))
		waitAuditClient(t, buf, "[2001:db8::9]:5555")
	})
	t.Run("v2 LOCAL keeps the peer address", func(t *testing.T) {
		conn := rawDial(t, p.Addr())
		local := append(append([]byte(nil), proxyV2Sig...), 0x20, 0x00, 0, 0)
		listMirrorsThrough(t, conn, local)
		waitAuditClient(t, buf, conn.LocalAddr().String())
	})
	t.Run("no header: refused", func(t *testing.T) {
		conn := rawDial(t, p.Addr())
		_, _ = conn.Write(kmsg.NewRequestFormatter().AppendRequest(nil, kmsg.NewPtrMetadataRequest(), 1))
		expectClosed(t, conn, "Kafka request without a PROXY header")
	})
	t.Run("franz-go without header: refused", func(t *testing.T) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(p.AdvertisedAddr()), kgo.RequestRetries(0), kgo.RetryTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err == nil {
			t.Fatal("a client that sends no PROXY header got a Metadata answer")
		}
	})
}

func TestProxyProtocolTLSListener(t *testing.T) {
	pki := newTestPKI(t)
	p, buf := proxyProtoFixture(t, func(cfg *Config) {
		cfg.TLS = ListenerTLS{CertFile: pki.serverCert, KeyFile: pki.serverKey}
	})
	src := &net.TCPAddr{IP: net.IPv4(198, 51, 100, 3), Port: 1234}
	raw := rawDial(t, p.Addr())
	if _, err := raw.Write(proxyV2Header(src, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, nil)); err != nil {
		t.Fatal(err)
	}
	conn := tls.Client(raw, &tls.Config{RootCAs: pki.pool, ServerName: "127.0.0.1"})
	listMirrorsThrough(t, conn, nil)
	waitAuditClient(t, buf, "198.51.100.3:1234")

	// TLS straight away, no header: the handshake fails and the connection closes.
	bare := tls.Client(rawDial(t, p.Addr()), &tls.Config{RootCAs: pki.pool, ServerName: "127.0.0.1"})
	_ = bare.SetDeadline(time.Now().Add(10 * time.Second))
	if err := bare.Handshake(); err == nil {
		t.Fatal("a TLS client without a PROXY header completed its handshake")
	}
}

// A connection that sends nothing is closed once the header timeout passes, on both plaintext
// engines and the TLS listener.
func TestProxyProtocolHeaderTimeout(t *testing.T) {
	saved := proxyHeaderTimeout
	t.Cleanup(func() { proxyHeaderTimeout = saved }) // registered first: runs after the proxies stop
	proxyHeaderTimeout = 500 * time.Millisecond
	pki := newTestPKI(t)
	gnetP, _ := proxyProtoFixture(t, func(cfg *Config) { cfg.PlaintextEngine = EngineGnet })
	netpollP, _ := proxyProtoFixture(t, func(cfg *Config) { cfg.PlaintextEngine = EngineNetpoll })
	tlsP, _ := proxyProtoFixture(t, func(cfg *Config) {
		cfg.TLS = ListenerTLS{CertFile: pki.serverCert, KeyFile: pki.serverKey}
	})
	for name, p := range map[string]*Proxy{"gnet": gnetP, "netpoll": netpollP, "tls": tlsP} {
		expectClosed(t, rawDial(t, p.Addr()), name+" connection that never sends a PROXY header")
	}
}
