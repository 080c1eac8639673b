package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/internal/syncbuf"
	"github.com/kmirror/kmirror/protocol"
)

// fakeUpstream is the smallest broker the proxy works in front of: it answers ApiVersions
// (every key kmsg knows below kmirror's range, plus what extra holds), Metadata (itself as
// broker 1) and UnregisterController (key 94, with a marker the test recognises). Any other
// key is recorded and the connection closed. kfake cannot serve here: it cannot advertise a
// key kmsg does not know, nor read one.
type fakeUpstream struct {
	t     *testing.T
	ln    net.Listener
	extra atomic.Pointer[[]kmsg.ApiVersionsResponseApiKey]

	mu    sync.Mutex
	keys  []int16 // every request key received
	conns []net.Conn
	wg    sync.WaitGroup
}

const unregisterMarker = 4321 // ThrottleMillis of the fake's UnregisterController answer

func startFakeUpstream(t *testing.T, extra ...kmsg.ApiVersionsResponseApiKey) *fakeUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeUpstream{t: t, ln: ln}
	f.extra.Store(&extra)
	f.wg.Go(f.accept)
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *fakeUpstream) addr() string { return f.ln.Addr().String() }

func (f *fakeUpstream) received(key int16) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.keys {
		if k == key {
			return true
		}
	}
	return false
}

func (f *fakeUpstream) accept() {
	for {
		conn, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns = append(f.conns, conn)
		f.mu.Unlock()
		f.wg.Go(func() { f.serve(conn) })
	}
}

func (f *fakeUpstream) serve(conn net.Conn) {
	defer conn.Close()
	for {
		payload, err := protocol.ReadFrame(conn, 1<<20)
		if err != nil {
			return
		}
		h, body, err := protocol.ParseRequestHeader(payload)
		if err != nil {
			f.t.Errorf("fake upstream: %v", err)
			return
		}
		f.mu.Lock()
		f.keys = append(f.keys, h.APIKey)
		f.mu.Unlock()
		req := kmsg.RequestForKey(h.APIKey)
		if req == nil {
			return // a key this broker does not know: close, as Kafka does
		}
		req.SetVersion(h.APIVersion)
		if err := req.ReadFrom(body); err != nil {
			f.t.Errorf("fake upstream: %s v%d: %v", kmsg.NameForKey(h.APIKey), h.APIVersion, err)
			return
		}
		var resp kmsg.Response
		switch req := req.(type) {
		case *kmsg.ApiVersionsRequest:
			r := req.ResponseKind().(*kmsg.ApiVersionsResponse)
			for key := int16(0); key < protocol.MinMirrorKey; key++ {
				if kr := kmsg.RequestForKey(key); kr != nil {
					r.ApiKeys = append(r.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: key, MaxVersion: kr.MaxVersion()})
				}
			}
			r.ApiKeys = append(r.ApiKeys, *f.extra.Load()...)
			resp = r
		case *kmsg.MetadataRequest:
			r := req.ResponseKind().(*kmsg.MetadataResponse)
			host, port, _ := net.SplitHostPort(f.addr())
			p, _ := strconv.Atoi(port)
			r.Brokers = []kmsg.MetadataResponseBroker{{NodeID: 1, Host: host, Port: int32(p)}}
			r.ControllerID = 1
			resp = r
		case *kmsg.UnregisterControllerRequest:
			r := req.ResponseKind().(*kmsg.UnregisterControllerResponse)
			r.ThrottleMillis = unregisterMarker
			resp = r
		default:
			return
		}
		resp.SetVersion(h.APIVersion)
		out := protocol.AppendResponseHeader(nil, h.CorrelationID, protocol.ResponseHeaderVersion(h.APIKey, h.APIVersion))
		if _, err := conn.Write(protocol.AppendFrame(nil, resp.AppendTo(out))); err != nil {
			return
		}
	}
}

// advertisedKeys asks the proxy for ApiVersions on a fresh connection.
func advertisedKeys(t *testing.T, p *Proxy) map[int16]kmsg.ApiVersionsResponseApiKey {
	t.Helper()
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1"
	resp := rawConn(t, p.Addr(), req).(*kmsg.ApiVersionsResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions: error %d", resp.ErrorCode)
	}
	keys := map[int16]kmsg.ApiVersionsResponseApiKey{}
	for _, k := range resp.ApiKeys {
		keys[k.ApiKey] = k
	}
	return keys
}

// expectNoAnswer sends req and requires the proxy to close the connection without writing a
// single byte back: no response of any kind, mirror or not.
func expectNoAnswer(t *testing.T, addr string, req kmsg.Request) {
	t.Helper()
	conn := rawDial(t, addr)
	if _, err := conn.Write(kmsg.NewRequestFormatter().AppendRequest(nil, req, 7)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn)
	var ne net.Error
	switch {
	case len(got) > 0:
		t.Fatalf("key %d: the proxy answered %d bytes (%x); a key the destination owns must never get a mirror response", req.Key(), len(got), got)
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("key %d: the proxy neither answered nor closed the connection", req.Key())
	}
}

// TestMirrorKeyCollision: a destination that advertises a key of kmirror's range (here 1000,
// CreateMirror's) takes it: the proxy logs ERROR naming it, leaves it out of ApiVersions and
// never answers it with a mirror response, while the other mirror keys are still served and
// Kafka's keys below the range (UnregisterController, 94) reach the destination.
func TestMirrorKeyCollision(t *testing.T) {
	up := startFakeUpstream(t,
		kmsg.ApiVersionsResponseApiKey{ApiKey: protocol.KeyCreateMirror, MaxVersion: 2})
	var logs syncbuf.Buffer
	p := startProxyWith(t, []string{up.addr()}, []Option{WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))})

	// Start-up: the discovery connection's ApiVersions already showed the collision.
	polltest.Until(t, 10*time.Second, "the start-up check's ERROR", func() bool {
		return strings.Contains(logs.String(), "level=ERROR") && strings.Contains(logs.String(), "1000 (CreateMirror)")
	})
	if strings.Contains(logs.String(), "1001 (") {
		t.Errorf("keys the destination does not advertise reported as colliding:\n%s", logs.String())
	}

	keys := advertisedKeys(t, p)
	if k, ok := keys[protocol.KeyCreateMirror]; ok {
		t.Errorf("the proxy advertises the colliding key 1000: %+v", k)
	}
	for _, api := range protocol.MirrorAPIs()[1:] {
		if k, ok := keys[api.Key]; !ok || k.MaxVersion != api.MaxVersion {
			t.Errorf("mirror key %d (%s) advertised as %+v, %v", api.Key, api.Name, k, ok)
		}
	}
	if _, ok := keys[94]; !ok {
		t.Error("UnregisterController (94), advertised by the destination, is not advertised by the proxy")
	}

	// The colliding key gets no mirror answer, with or without a handler, and since kmsg does
	// not know a Kafka key 1000 the proxy cannot carry it either: the connection closes.
	p.Handlers.Register(protocol.KeyCreateMirror, func(_ context.Context, _ *MirrorRequest) (kmsg.Response, error) {
		t.Error("the CreateMirror handler ran for a key the destination owns")
		return protocol.NewPtrCreateMirrorResponse(), nil
	})
	expectNoAnswer(t, p.Addr(), protocol.NewPtrCreateMirrorRequest())
	if up.received(protocol.KeyCreateMirror) {
		t.Error("the proxy forwarded key 1000 although it cannot decode it")
	}

	// Another mirror key is still kmirror's.
	resp := rawConn(t, p.Addr(), protocol.NewPtrListMirrorsRequest()).(*protocol.ListMirrorsResponse)
	if resp.ErrorCode != errInvalidRequest || resp.ErrorMessage == nil || *resp.ErrorMessage != mirroringDisabledMessage {
		t.Errorf("ListMirrors: %+v", resp)
	}

	// Kafka's key 94 reaches the destination and its answer comes back.
	unreg := rawConn(t, p.Addr(), kmsg.NewPtrUnregisterControllerRequest()).(*kmsg.UnregisterControllerResponse)
	if unreg.ThrottleMillis != unregisterMarker || !up.received(94) {
		t.Errorf("UnregisterController through the proxy: %+v (the destination's marker is %d)", unreg, unregisterMarker)
	}
}

// TestMirrorKeyCollisionOnClientApiVersions: the check runs on every ApiVersions answer that
// passes through, not only at start-up: a destination that starts advertising a key of the
// range (a broker upgraded in place) takes it from the answer that first shows it.
func TestMirrorKeyCollisionOnClientApiVersions(t *testing.T) {
	up := startFakeUpstream(t)
	var logs syncbuf.Buffer
	// No discovery round in between: the client's answer must be the one that shows it.
	p := startProxyWith(t, []string{up.addr()}, []Option{WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))},
		func(c *Config) { c.MetadataRefresh = time.Hour })

	keys := advertisedKeys(t, p)
	if _, ok := keys[protocol.KeyDeleteMirror]; !ok {
		t.Fatal("DeleteMirror not advertised before any collision")
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("ERROR logged without a collision:\n%s", logs.String())
	}

	up.extra.Store(&[]kmsg.ApiVersionsResponseApiKey{{ApiKey: protocol.KeyDeleteMirror}})
	keys = advertisedKeys(t, p)
	if k, ok := keys[protocol.KeyDeleteMirror]; ok {
		t.Errorf("the answer that shows the collision still advertises 1010 as kmirror's: %+v", k)
	}
	if !strings.Contains(logs.String(), "1010 (DeleteMirror)") || !strings.Contains(logs.String(), "an ApiVersions answer to a client") {
		t.Errorf("no ERROR naming key 1010 from a client's answer:\n%s", logs.String())
	}
	expectNoAnswer(t, p.Addr(), protocol.NewPtrDeleteMirrorRequest())
}
