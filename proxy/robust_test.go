package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// expectClosed fails unless the proxy closes c (EOF or reset) within a few seconds.
func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue // a response to something valid before the bad frame
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%s: proxy did not close the connection", what)
		}
		return
	}
}

func metadataRoundTrip(t *testing.T, c net.Conn, corrID int32) {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 9
	resp := roundTrip(t, c, req, corrID).(*kmsg.MetadataResponse)
	if len(resp.Brokers) == 0 {
		t.Fatalf("metadata through proxy: no brokers")
	}
}

// TestHostileConnections sends garbage, oversize, truncated and unknown requests, each on
// its own connection, while a healthy connection keeps working.
func TestHostileConnections(t *testing.T) {
	forEachEngine(t, testHostileConnections)
}

func testHostileConnections(t *testing.T, engine string) {
	c := startKfake(t, 1)
	p := startProxy(t, c.ListenAddrs(), withEngine(engine), func(cfg *Config) { cfg.MaxFrameBytes = 1 << 20 })
	healthy := rawDial(t, p.Addr())
	corr := int32(0)
	next := func() int32 { corr++; return corr }
	metadataRoundTrip(t, healthy, next())

	frame := func(payload []byte) []byte {
		return binary.BigEndian.AppendUint32(nil, uint32(len(payload))) // caller appends payload
	}
	header := func(key, version int16) []byte {
		b := binary.BigEndian.AppendUint16(nil, uint16(key))
		b = binary.BigEndian.AppendUint16(b, uint16(version))
		b = binary.BigEndian.AppendUint32(b, 7)
		return binary.BigEndian.AppendUint16(b, 0xffff) // null client id
	}
	withFrame := func(payload []byte) []byte { return append(frame(payload), payload...) }
	produceTruncated := append(header(0, 7), 0xff) // v7: non-flexible; body cut inside the transactional id
	cases := map[string][]byte{
		"http garbage":            []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"oversize frame":          binary.BigEndian.AppendUint32(nil, 1<<20+1),
		"negative size":           binary.BigEndian.AppendUint32(nil, 0x80000000),
		"short header":            withFrame([]byte{0, 3, 0}),
		"client id overruns":      withFrame(append(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 0x00030009), 1), 0x7f, 0x00)),
		"unknown api key":         withFrame(header(9999, 0)),
		"too new Metadata":        withFrame(header(3, 99)),
		"truncated produce":       withFrame(produceTruncated),
		"valid then truncated":    append(kmsg.NewRequestFormatter().AppendRequest(nil, kmsg.NewPtrMetadataRequest(), 1), 0, 0, 1, 0, 0, 3),
		"truncated frame and FIN": {0, 0, 0, 100, 0, 3, 0, 9},
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			conn := rawDial(t, p.Addr())
			if _, err := conn.Write(b); err != nil {
				t.Fatal(err)
			}
			if name == "truncated frame and FIN" || name == "valid then truncated" {
				_ = conn.(*net.TCPConn).CloseWrite()
			}
			expectClosed(t, conn, name)
			metadataRoundTrip(t, healthy, next())
		})
	}

	// Random payloads in valid frames must never take the proxy down.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		payload := make([]byte, rng.IntN(64))
		for j := range payload {
			payload[j] = byte(rng.Uint32())
		}
		if len(payload) >= 2 && i%2 == 0 {
			payload[0], payload[1] = 0, byte(rng.IntN(70)) // a known key with random rest
		}
		conn, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write(withFrame(payload))
		_ = conn.Close()
	}
	metadataRoundTrip(t, healthy, next())
	polltest.Until(t, 10*time.Second, "hostile sessions to be cleaned up", func() bool { return countSessions(p) == 1 })
}

func countSessions(p *Proxy) int {
	n := 0
	p.sessions.Range(func(any, any) bool { n++; return true })
	return n
}

// TestAcksZeroProduceDoesNotStall pipelines an acks=0 Produce (no response) between two
// Metadata requests: the second Metadata response must still arrive, in order.
func TestAcksZeroProduceDoesNotStall(t *testing.T) {
	forEachEngine(t, testAcksZeroProduceDoesNotStall)
}

func testAcksZeroProduceDoesNotStall(t *testing.T, engine string) {
	c := startKfake(t, 1)
	p := startProxy(t, c.ListenAddrs(), withEngine(engine))
	conn := rawDial(t, p.Addr())
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("t"))
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 9
	var out []byte
	out = append(out, f.AppendRequest(nil, md, 1)...)
	for i, v := range []int16{3, 7, 9, 11} { // classic and compact transactional id encodings (kfake: v3+)
		prod := kmsg.NewPtrProduceRequest()
		prod.Version = v
		prod.Acks = 0
		prod.TimeoutMillis = 1000
		if v >= 3 {
			tx := "tx-" + strconv.Itoa(i)
			prod.TransactionID = &tx // a non-null id exercises the offset arithmetic
		}
		// No topics: nothing for the broker to refuse (a refused acks=0 Produce makes a broker
		// close the connection, its only way to report an error).
		out = append(out, f.AppendRequest(nil, prod, int32(100+i))...)
	}
	out = append(out, f.AppendRequest(nil, md, 2)...)
	if _, err := conn.Write(out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int32{1, 2} {
		nextResponse(t, conn, want, 5*time.Second)
	}
}

// TestAcksZeroWithFranzGo produces with acks=0 through the proxy and reads the records back.
func TestAcksZeroWithFranzGo(t *testing.T) {
	c := startKfake(t, 3)
	p := startProxy(t, c.ListenAddrs())
	var d dialRecorder
	produceConsume(t, p.AdvertisedAddr(), &d, 300, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	assertOnlyProxyDialed(t, p, &d)
}

func TestApiVersions(t *testing.T) {
	c := startKfake(t, 1)
	p := startProxy(t, c.ListenAddrs())
	for v := int16(0); v <= kmsgMaxVersion(18); v++ {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = v
		req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1"
		resp := rawConn(t, p.Addr(), req).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("v%d: error %d", v, resp.ErrorCode)
		}
		keys := map[int16]kmsg.ApiVersionsResponseApiKey{}
		for _, k := range resp.ApiKeys {
			keys[k.ApiKey] = k
			if !protocol.IsMirrorKey(k.ApiKey) && kmsgMaxVersion(k.ApiKey) < 0 {
				t.Errorf("v%d advertises key %d the proxy does not know", v, k.ApiKey)
			}
			if rewrittenKeys[k.ApiKey] && k.MaxVersion > kmsgMaxVersion(k.ApiKey) {
				t.Errorf("v%d advertises %s up to v%d, beyond what the proxy decodes", v, kmsg.NameForKey(k.ApiKey), k.MaxVersion)
			}
		}
		for _, api := range protocol.MirrorAPIs() {
			if k, ok := keys[api.Key]; !ok || k.MinVersion != api.MinVersion || k.MaxVersion != api.MaxVersion {
				t.Errorf("v%d: mirror key %d (%s) advertised as %+v", v, api.Key, api.Name, k)
			}
		}
		if _, ok := keys[3]; !ok {
			t.Errorf("v%d: Metadata not advertised", v)
		}
		if f, ok := keys[1]; !ok || f.MaxVersion != maxFetchVersion {
			t.Errorf("v%d: Fetch advertised as %+v, want max v%d (no KIP-951 endpoints)", v, f, maxFetchVersion)
		}
	}

	// A version newer than the proxy knows: UNSUPPORTED_VERSION with a v0 body (KIP-511).
	conn := rawDial(t, p.Addr())
	hdr := binary.BigEndian.AppendUint16(nil, 18)
	hdr = binary.BigEndian.AppendUint16(hdr, 99)
	hdr = binary.BigEndian.AppendUint32(hdr, 42)
	hdr = binary.BigEndian.AppendUint16(hdr, 0xffff)
	hdr = append(hdr, 0, 0, 0) // header tags + an arbitrary future body
	if _, err := conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(hdr))), hdr...)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	fr, err := readFrame(conn, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	corr, body, _ := splitResponse(fr, 0)
	resp := kmsg.ApiVersionsResponse{Version: 0}
	if err := resp.ReadFrom(body); err != nil || corr != 42 {
		t.Fatalf("fallback answer: corr %d err %v", corr, err)
	}
	if resp.ErrorCode != errUnsupportedVer || len(resp.ApiKeys) != 1 || resp.ApiKeys[0].ApiKey != 18 || resp.ApiKeys[0].MaxVersion != kmsgMaxVersion(18) {
		t.Fatalf("fallback answer %+v", resp)
	}
	// The client then retries on the same connection with a supported version.
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = resp.ApiKeys[0].MaxVersion
	req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1"
	if r := roundTrip(t, conn, req, 43).(*kmsg.ApiVersionsResponse); r.ErrorCode != 0 {
		t.Fatalf("retry after fallback: error %d", r.ErrorCode)
	}
}

func TestMirrorKeysAnsweredLocally(t *testing.T) {
	c := startKfake(t, 1)
	p := startProxy(t, c.ListenAddrs())
	conn := rawDial(t, p.Addr())
	for i, api := range protocol.MirrorAPIs() {
		req := protocol.RequestForKey(api.Key)
		resp := roundTrip(t, conn, req, int32(i+1))
		v := fieldsOf(resp)
		if v.code != errInvalidRequest || v.msg != mirroringDisabledMessage {
			t.Errorf("%s without handler: code %d message %q", api.Name, v.code, v.msg)
		}
	}

	// A registered handler answers, and its (slow) answer keeps its place in the order.
	var calls atomic.Int32
	p.Handlers.Register(protocol.KeyListMirrors, func(ctx context.Context, req *MirrorRequest) (kmsg.Response, error) {
		calls.Add(1)
		r := protocol.NewPtrListMirrorsRequest()
		if err := r.ReadFrom(req.Body); err != nil {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond) // a slow handler: the Metadata behind it must wait
		resp := protocol.NewPtrListMirrorsResponse()
		msg := "handled"
		resp.ErrorMessage = &msg
		return resp, nil
	})
	p.Handlers.Register(protocol.KeyDeleteMirror, func(context.Context, *MirrorRequest) (kmsg.Response, error) {
		return nil, protocol.ErrorForCode(137)
	})
	f := kmsg.NewRequestFormatter()
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 9
	var out []byte
	out = append(out, f.AppendRequest(nil, md, 100)...)
	out = append(out, f.AppendRequest(nil, protocol.NewPtrListMirrorsRequest(), 101)...)
	out = append(out, f.AppendRequest(nil, md, 102)...)
	out = append(out, f.AppendRequest(nil, protocol.NewPtrDeleteMirrorRequest(), 103)...)
	if _, err := conn.Write(out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int32{100, 101, 102, 103} {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		fr, err := readFrame(conn, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		corr, body, _ := splitResponse(fr, 1)
		if corr != want {
			t.Fatalf("response %d arrived while %d was due", corr, want)
		}
		switch want {
		case 101:
			r := protocol.NewPtrListMirrorsResponse()
			if err := r.ReadFrom(body); err != nil || r.ErrorMessage == nil || *r.ErrorMessage != "handled" {
				t.Fatalf("ListMirrors handler answer: %v %+v", err, r)
			}
		case 103:
			r := protocol.NewPtrDeleteMirrorResponse()
			if err := r.ReadFrom(body); err != nil || r.ErrorCode != 137 {
				t.Fatalf("DeleteMirror handler error answer: %v %+v", err, r)
			}
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("handler called %d times", calls.Load())
	}
}

type errFields struct {
	code int16
	msg  string
}

func fieldsOf(r kmsg.Response) errFields {
	var out errFields
	rv := reflectFields(r)
	out.code = int16(rv["ErrorCode"].(int16))
	if m, ok := rv["ErrorMessage"].(*string); ok && m != nil {
		out.msg = *m
	}
	return out
}

// TestInFlightLimitKeepsOrder pipelines far more requests than the in-flight limit on one
// connection: the proxy stops taking frames at the limit and resumes as responses leave,
// and every response arrives, in order.
func TestInFlightLimitKeepsOrder(t *testing.T) {
	forEachEngine(t, testInFlightLimitKeepsOrder)
}

func testInFlightLimitKeepsOrder(t *testing.T, engine string) {
	c := startKfake(t, 1)
	p := startProxy(t, c.ListenAddrs(), withEngine(engine), func(cfg *Config) { cfg.MaxInFlight = 2 })
	var maxSeen atomic.Int64
	conn := rawDial(t, p.Addr())
	f := kmsg.NewRequestFormatter()
	const n = 300
	var out []byte
	for i := range n {
		md := kmsg.NewPtrMetadataRequest()
		md.Version = int16(i % 10)
		out = append(out, f.AppendRequest(nil, md, int32(i))...)
	}
	done := make(chan error, 1)
	go func() { _, err := conn.Write(out); done <- err }()
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				maxSeen.Store(max(maxSeen.Load(), int64(p.totalInFlight())))
			}
		}
	}()
	defer close(stop)
	for i := range n {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		fr, err := readFrame(conn, 1<<20)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if got := int32(binary.BigEndian.Uint32(fr[4:])); got != int32(i) {
			t.Fatalf("response %d has correlation id %d", i, got)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m := maxSeen.Load(); m > 2 {
		t.Fatalf("saw %d requests in flight, limit 2", m)
	}
}

func TestIdleTimeoutClosesConnection(t *testing.T) {
	forEachEngine(t, testIdleTimeoutClosesConnection)
}

func testIdleTimeoutClosesConnection(t *testing.T, engine string) {
	c := startKfake(t, 1)
	p := startProxy(t, c.ListenAddrs(), withEngine(engine), func(cfg *Config) { cfg.IdleTimeout = 200 * time.Millisecond })
	conn := rawDial(t, p.Addr())
	// The idle clock restarts on the request and on its response. Taken before the request
	// is sent, start is never later than the last activity however slow the round trip, so
	// a close sooner than the bound after start can only be a close before the timeout.
	start := time.Now()
	metadataRoundTrip(t, conn, 1)
	expectClosed(t, conn, "idle connection")
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Fatalf("closed %s after the request, before the idle timeout", el)
	}
}

// TestShutdownDrainsInFlight: a request being served when shutdown starts is answered
// before the connection closes; shutdown then completes.
func TestShutdownDrainsInFlight(t *testing.T) {
	forEachEngine(t, testShutdownDrainsInFlight)
}

func testShutdownDrainsInFlight(t *testing.T, engine string) {
	c := startKfake(t, 1)
	cfg := Config{Upstream: c.ListenAddrs(), Listen: "127.0.0.1:0", AdvertisedHost: "127.0.0.1", PlaintextEngine: engine}
	p, err := New(cfg, WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	p.Handlers.Register(protocol.KeyListMirrors, func(context.Context, *MirrorRequest) (kmsg.Response, error) {
		close(entered)
		<-release
		return protocol.NewPtrListMirrorsResponse(), nil
	})
	conn := rawDial(t, p.Addr())
	if _, err := conn.Write(kmsg.NewRequestFormatter().AppendRequest(nil, protocol.NewPtrListMirrorsRequest(), 5)); err != nil {
		t.Fatal(err)
	}
	<-entered
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- p.Shutdown(ctx)
	}()
	polltest.Until(t, 5*time.Second, "drain to start", p.draining.Load)
	select {
	case err := <-shut:
		t.Fatalf("shutdown returned (%v) while a request was in flight", err)
	default:
	}
	close(release)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	fr, err := readFrame(conn, 1<<20)
	if err != nil {
		t.Fatalf("in-flight request not answered during drain: %v", err)
	}
	if corr := int32(binary.BigEndian.Uint32(fr[4:])); corr != 5 {
		t.Fatalf("answer has correlation id %d", corr)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := readFrame(conn, 1<<20); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("connection still open after shutdown: %v", err)
	}
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "reset") }
