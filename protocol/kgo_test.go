package protocol

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// mirrorServer is the smallest Kafka listener a kgo.Client will talk to:
// it answers ApiVersions (advertising every key kmsg knows plus the mirror
// keys) and mirror RPCs, using only this package's frame, header and
// message code. Anything else fails the test.
type mirrorServer struct {
	t        *testing.T
	ln       net.Listener
	answer   func(kmsg.Request) kmsg.Response
	keys     []kmsg.ApiVersionsResponseApiKey // advertised instead of the default, if set
	received chan kmsg.Request
	headers  chan RequestHeader

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startMirrorServer(t *testing.T, answer func(kmsg.Request) kmsg.Response) *mirrorServer {
	return startMirrorServerKeys(t, nil, answer)
}

// startMirrorServerKeys starts a mirrorServer whose ApiVersions answer lists
// keys (nil: every key kmsg knows plus the mirror keys).
func startMirrorServerKeys(t *testing.T, keys []kmsg.ApiVersionsResponseApiKey, answer func(kmsg.Request) kmsg.Response) *mirrorServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &mirrorServer{t: t, ln: ln, answer: answer, keys: keys, received: make(chan kmsg.Request, 16), headers: make(chan RequestHeader, 16)}
	s.wg.Go(s.accept)
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *mirrorServer) accept() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, conn)
		s.mu.Unlock()
		s.wg.Go(func() { s.serve(conn) })
	}
}

func (s *mirrorServer) serve(conn net.Conn) {
	defer conn.Close()
	for {
		payload, err := ReadFrame(conn, 1<<20)
		if err != nil {
			return // client closed, or cleanup closed the conn
		}
		h, body, err := ParseRequestHeader(payload)
		if err != nil {
			s.t.Errorf("server: %v", err)
			return
		}
		var resp kmsg.Response
		switch {
		case h.APIKey == 18:
			resp = s.apiVersions(h, body)
		case IsMirrorKey(h.APIKey):
			req := RequestForKey(h.APIKey)
			req.SetVersion(h.APIVersion)
			if err := req.ReadFrom(body); err != nil {
				s.t.Errorf("server: %v", err)
				return
			}
			select {
			case s.headers <- h:
				s.received <- req // same capacity as headers
			default:
				s.t.Errorf("server: test is not reading what the server received")
				return
			}
			resp = s.answer(req)
		default:
			s.t.Errorf("server: unexpected %s v%d request", APIName(h.APIKey), h.APIVersion)
			return
		}
		resp.SetVersion(h.APIVersion)
		out := AppendResponseHeader(nil, h.CorrelationID, ResponseHeaderVersion(h.APIKey, h.APIVersion))
		if _, err := conn.Write(AppendFrame(nil, resp.AppendTo(out))); err != nil {
			return
		}
	}
}

func (s *mirrorServer) apiVersions(h RequestHeader, body []byte) kmsg.Response {
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(h.APIVersion)
	if err := req.ReadFrom(body); err != nil {
		s.t.Errorf("server: ApiVersions v%d: %v", h.APIVersion, err)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	if s.keys != nil {
		resp.ApiKeys = s.keys
		return resp
	}
	for key := int16(0); key < 1024; key++ {
		if r := kmsg.RequestForKey(key); r != nil && !IsMirrorKey(key) {
			resp.ApiKeys = append(resp.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: key, MinVersion: 0, MaxVersion: r.MaxVersion()})
		}
	}
	for _, api := range MirrorAPIs() {
		resp.ApiKeys = append(resp.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: api.Key, MinVersion: api.MinVersion, MaxVersion: api.MaxVersion})
	}
	return resp
}

// TestKgoNeedsMaxVersions documents why KgoMaxVersions exists: with its
// default table kgo refuses mirror keys before dialing anyone.
func TestKgoNeedsMaxVersions(t *testing.T) {
	srv := startMirrorServer(t, func(req kmsg.Request) kmsg.Response { return req.ResponseKind() })
	cl, err := kgo.NewClient(kgo.SeedBrokers(srv.ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cl.Request(ctx, &DeleteMirrorRequest{MirrorName: "m"}); err == nil || !strings.Contains(err.Error(), "request key is unknown") {
		t.Fatalf("kgo's default max versions now allow mirror keys (err %v); KgoMaxVersions may be unnecessary", err)
	}
	vs := KgoMaxVersions(nil)
	for _, api := range MirrorAPIs() {
		if v, ok := vs.LookupMaxKeyVersion(api.Key); !ok || v != api.MaxVersion {
			t.Errorf("%s: %d, %v", api.Name, v, ok)
		}
	}
	if v, ok := vs.LookupMaxKeyVersion(0); !ok || v < 9 {
		t.Errorf("Produce lost from the base table: %d %v", v, ok)
	}
}

// TestKgoInterop: mirror RPCs sent by a kgo.Client reach a server built on this package's
// framing exactly as sent, header and tagged fields included, and the answers, mirror errors
// among them, come back intact.
func TestKgoInterop(t *testing.T) {
	describe := &DescribeMirrorsResponse{Mirrors: []DescribeMirrorsResponseMirror{{Name: "dr",
		Topics: []DescribeMirrorsResponseTopic{{Name: "orders", Partitions: []DescribeMirrorsResponsePartition{
			{Partition: 0, State: "MIRRORING", SourceHighWatermark: 10, DestinationHighWatermark: 8, Lag: 2, LastMirroredOffset: -1},
		}}}}}}
	srv := startMirrorServer(t, interopAnswers(t, describe))

	cl, err := kgo.NewClient(kgo.SeedBrokers(srv.ln.Addr().String()), kgo.ClientID("interop-test"),
		kgo.MaxVersions(KgoMaxVersions(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	create := &CreateMirrorRequest{MirrorName: "dr", Configs: []CreateMirrorRequestConfig{
		{Name: "bootstrap.servers", Value: strp("src:9092")}, {Name: "sasl.jaas.config"}}}
	resp, err := cl.Request(ctx, create)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.(*CreateMirrorResponse); got.ErrorCode != 0 {
		t.Fatalf("CreateMirror: %+v", got)
	}
	if got := <-srv.received; !reflect.DeepEqual(got, create) {
		t.Fatalf("server decoded %+v, client sent %+v", got, create)
	}
	if h := <-srv.headers; !h.Flexible || h.ClientID == nil || *h.ClientID != "interop-test" {
		t.Fatalf("header from kgo: %+v", h)
	}

	// A mirror error travels back with its message.
	resp, err = cl.Request(ctx, &CreateMirrorRequest{MirrorName: "taken"})
	if err != nil {
		t.Fatal(err)
	}
	<-srv.received
	<-srv.headers
	got := resp.(*CreateMirrorResponse)
	if err := ResponseError(got.ErrorCode, got.ErrorMessage); !errors.Is(err, ErrMirrorAlreadyExists) {
		t.Fatalf("CreateMirror taken: %v", err)
	}

	// Known tagged fields and unknown tags survive kgo's framing.
	add := &AddTopicsToMirrorRequest{MirrorName: "dr", Topics: []AddTopicsToMirrorRequestTopic{NewAddTopicsToMirrorRequestTopic()},
		IncludePatterns: []string{"orders.*"}, UnknownTags: tagsOf(9, "nine")}
	add.Topics[0].Name = "orders"
	resp, err = cl.Request(ctx, add)
	if err != nil {
		t.Fatal(err)
	}
	<-srv.headers
	if got := <-srv.received; !reflect.DeepEqual(got, add) {
		t.Fatalf("server decoded %+v, client sent %+v", got, add)
	}
	if got := resp.(*AddTopicsToMirrorResponse); len(got.Topics) != 1 || got.Topics[0].Name != "orders" {
		t.Fatalf("AddTopicsToMirror: %+v", got)
	}

	resp, err = cl.Request(ctx, &DescribeMirrorsRequest{MirrorNames: []string{"dr"}})
	if err != nil {
		t.Fatal(err)
	}
	<-srv.received
	<-srv.headers
	if !reflect.DeepEqual(resp, describe) {
		t.Fatalf("DescribeMirrors\n got %+v\nwant %+v", resp, describe)
	}
}

// interopAnswers is TestKgoInterop's server: CreateMirror succeeds unless the mirror is named
// "taken", DescribeMirrors is answered describe, and AddTopicsToMirror adds every topic it
// names. Any other request fails the test.
func interopAnswers(t *testing.T, describe *DescribeMirrorsResponse) func(kmsg.Request) kmsg.Response {
	return func(req kmsg.Request) kmsg.Response {
		switch req := req.(type) {
		case *CreateMirrorRequest:
			if req.MirrorName == "taken" {
				return &CreateMirrorResponse{ErrorCode: ErrMirrorAlreadyExists.Code, ErrorMessage: strp(`mirror "taken" already exists`)}
			}
			return &CreateMirrorResponse{}
		case *DescribeMirrorsRequest:
			return describe
		case *AddTopicsToMirrorRequest:
			var resp AddTopicsToMirrorResponse
			for _, topic := range req.Topics {
				resp.Topics = append(resp.Topics, NewTopicResult(topic.Name, nil))
			}
			return &resp
		}
		t.Errorf("server: no answer for %T", req)
		return req.ResponseKind()
	}
}

// TestProbeMirrorAPIs: a client finds kmirror's keys from the ApiVersions
// answer, and a server with other keys (an older kmirror at 94..104, a Kafka
// broker) gets a clear error before any mirror request is sent.
func TestProbeMirrorAPIs(t *testing.T) {
	kafkaKeys := func() []kmsg.ApiVersionsResponseApiKey {
		var keys []kmsg.ApiVersionsResponseApiKey
		for key := int16(0); key <= 93; key++ {
			if r := kmsg.RequestForKey(key); r != nil {
				keys = append(keys, kmsg.ApiVersionsResponseApiKey{ApiKey: key, MaxVersion: r.MaxVersion()})
			}
		}
		return keys
	}
	oldKmirror := kafkaKeys()
	for k := int16(94); k <= 104; k++ {
		oldKmirror = append(oldKmirror, kmsg.ApiVersionsResponseApiKey{ApiKey: k})
	}
	wrongVersion := kafkaKeys()
	for _, api := range MirrorAPIs() {
		wrongVersion = append(wrongVersion, kmsg.ApiVersionsResponseApiKey{ApiKey: api.Key, MinVersion: 1, MaxVersion: 3})
	}
	for _, c := range []struct {
		name string
		keys []kmsg.ApiVersionsResponseApiKey
		want []string // substrings of the error; nil: no error
	}{
		{"kmirror at this build's keys", nil, nil},
		{"kafka broker", kafkaKeys(), []string{"at keys 1000–1011", "not kmirror or a different version", "CreateMirror (1000)", "highest API key is 93"}},
		{"older kmirror", oldKmirror, []string{"DeleteMirror (1010)", "Kafka does not have: [95 96 97 98 99 100 101 102 103 104]"}},
		{"other versions", wrongVersion, []string{"ListMirrors (1004) at v0..v0, advertised v1..v3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := startMirrorServerKeys(t, c.keys, func(req kmsg.Request) kmsg.Response {
				t.Errorf("server: %T sent before the probe passed", req)
				return req.ResponseKind()
			})
			cl, err := kgo.NewClient(kgo.SeedBrokers(srv.ln.Addr().String()), kgo.MaxVersions(KgoMaxVersions(nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = ProbeMirrorAPIs(ctx, cl)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrNotMirrorServer) {
				t.Fatalf("got %v, want ErrNotMirrorServer", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
