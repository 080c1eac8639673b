package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/metricstest"
	"github.com/kmirror/kmirror/internal/syncbuf"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/internal/audit"
	"github.com/kmirror/kmirror/internal/tlstest"
	"github.com/kmirror/kmirror/protocol"
)

// syncBuffer collects audit lines written from several goroutines.
type syncBuffer struct{ syncbuf.Buffer }

func (b *syncBuffer) events(t testing.TB) []audit.Event {
	var out []audit.Event
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var e audit.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// authzFixture is a SASL kfake cluster with ACLs and a proxy in client_auth sasl mode
// whose mirror handlers answer canned responses (the handlers' own logic is tested in apis/).
type authzFixture struct {
	p       *Proxy
	audit   *syncBuffer
	handled sync.Map // API key -> principal the handler saw
}

func newAuthzFixture(t *testing.T) *authzFixture {
	t.Helper()
	topicACL := func(name string, pattern kmsg.ACLResourcePatternType, ops ...kmsg.ACLOperation) []kfake.ACL {
		var out []kfake.ACL
		for _, op := range ops {
			out = append(out, kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: name, Pattern: pattern, Operation: op, Allow: true})
		}
		return out
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.SeedTopics(1, "t1", "t2"),
		kfake.Superuser("SCRAM-SHA-512", "admin", "admin-secret"),
		kfake.User("PLAIN", "alice", "alice-secret", topicACL("*", kmsg.ACLResourcePatternTypeLiteral,
			kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe)...),
		kfake.User("SCRAM-SHA-512", "bob", "bob-secret", topicACL("t1", kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLOperationDescribe)...),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	f := &authzFixture{audit: &syncBuffer{}}
	f.p = startProxyWith(t, kc.ListenAddrs(), []Option{WithAudit(audit.New(f.audit))}, func(cfg *Config) {
		cfg.UpstreamSASL = UpstreamSASL{Mechanism: "SCRAM-SHA-512", Username: "admin", Password: "admin-secret"}
		cfg.MetricsAddr = "127.0.0.1:0"
	})
	if f.p.cfg.ClientAuth != ClientAuthSASL {
		t.Fatalf("client_auth defaulted to %q with upstream_sasl set, want sasl", f.p.cfg.ClientAuth)
	}
	registerCannedHandlers(f.p, &f.handled)
	return f
}

// registerCannedHandlers answers every mirror RPC with a fixed response (DescribeMirrors and
// ListMirrors: mirror m with topics t1, t2) and records the principal each handler saw.
func registerCannedHandlers(p *Proxy, handled *sync.Map) {
	for _, api := range protocol.MirrorAPIs() {
		key := api.Key
		p.Handlers.Register(key, func(_ context.Context, r *MirrorRequest) (kmsg.Response, error) {
			handled.Store(key, r.Principal)
			switch key {
			case protocol.KeyDescribeMirrors:
				return &protocol.DescribeMirrorsResponse{Mirrors: []protocol.DescribeMirrorsResponseMirror{{
					Name: "m", Topics: []protocol.DescribeMirrorsResponseTopic{{Name: "t1"}, {Name: "t2"}},
					Groups: []protocol.DescribeMirrorsResponseGroup{{Name: "g"}},
				}}}, nil
			case protocol.KeyListMirrors:
				req := protocol.NewPtrListMirrorsRequest()
				if err := req.ReadFrom(r.Body); err != nil {
					return nil, err
				}
				m := protocol.ListMirrorsResponseMirror{Name: "m", TopicCount: 2}
				if req.IncludeTopicNames {
					m.TopicNames = []string{"t1", "t2"}
				}
				return &protocol.ListMirrorsResponse{Mirrors: []protocol.ListMirrorsResponseMirror{m}}, nil
			}
			return protocol.ResponseForKey(key), nil
		})
	}
}

func (f *authzFixture) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(f.p.AdvertisedAddr()),
		kgo.MaxVersions(protocol.KgoMaxVersions(nil)), kgo.RequestRetries(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func mirrorCall(t *testing.T, cl *kgo.Client, req kmsg.Request) (int16, string, kmsg.Response) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Request(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", protocol.APIName(req.Key()), err)
	}
	code := topErrorCode(resp)
	msg := ""
	if m := responseMessage(resp); m != nil {
		msg = *m
	}
	return code, msg, resp
}

func responseMessage(resp kmsg.Response) *string {
	switch r := resp.(type) {
	case *protocol.CreateMirrorResponse:
		return r.ErrorMessage
	case *protocol.RemoveTopicsFromMirrorResponse:
		return r.ErrorMessage
	case *protocol.WriteMirrorStateResponse:
		return r.ErrorMessage
	case *protocol.ReadMirrorStateResponse:
		return r.ErrorMessage
	case *protocol.DeleteMirrorResponse:
		return r.ErrorMessage
	}
	return nil
}

// TestAuthzKfakeSASL: on a SASL destination with ACLs (kfake), mirror RPCs get no answer
// before authentication, and afterwards the destination's authoriser decides per principal;
// every decision is audited and every refusal counted. The real-Kafka matrix is in
// authz_real_test.go.
func TestAuthzKfakeSASL(t *testing.T) {
	f := newAuthzFixture(t)
	authzRefusesUnauthenticated(t, f)

	alice := f.client(t, kgo.SASL(plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism()))
	admin := f.client(t, kgo.SASL(scram.Auth{User: "admin", Pass: "admin-secret"}.AsSha512Mechanism()))
	bob := f.client(t, kgo.SASL(scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha512Mechanism()))

	code, msg, _ := mirrorCall(t, alice, &protocol.RemoveTopicsFromMirrorRequest{MirrorName: "m", Topics: []protocol.TopicName{{Name: "t1"}}})
	if code != 144 || msg != "ALTER on CLUSTER is required to fail over mirror m (principal User:alice)" {
		t.Fatalf("alice fails over: %d %q", code, msg)
	}
	if code, msg, _ = mirrorCall(t, admin, &protocol.RemoveTopicsFromMirrorRequest{MirrorName: "m", Topics: []protocol.TopicName{{Name: "t1"}}}); code != 0 {
		t.Fatalf("admin fails over: %d %q", code, msg)
	}
	if p, _ := f.handled.Load(protocol.KeyRemoveTopicsFromMirror); p != "User:admin" {
		t.Fatalf("handler saw principal %v, want User:admin", p)
	}
	code, msg, _ = mirrorCall(t, admin, &protocol.WriteMirrorStateRequest{MirrorName: "m"})
	if code != 144 || !strings.HasPrefix(msg, "WriteMirrorState is never accepted from a client") {
		t.Fatalf("admin WriteMirrorState: %d %q", code, msg)
	}

	authzDescribeScopes(t, bob, admin)
	authzMirrorConfigsRefused(t, f, alice)
	authzAuditedAndCounted(t, f)
}

// authzRefusesUnauthenticated: on a raw connection, no SASL at all, a mirror RPC is refused
// without reaching its handler, and so is a SaslHandshake v0 (its tokens would be unframed).
func authzRefusesUnauthenticated(t *testing.T, f *authzFixture) {
	t.Helper()
	c := rawDial(t, f.p.AdvertisedAddr())
	resp := roundTrip(t, c, &protocol.DeleteMirrorRequest{MirrorName: "m"}, 7).(*protocol.DeleteMirrorResponse)
	if resp.ErrorCode != errSASLAuthenticationFailed || resp.ErrorMessage == nil ||
		*resp.ErrorMessage != "DeleteMirror refused: this kmirror answers only SASL-authenticated connections; authenticate with the destination's SASL mechanism first" {
		t.Fatalf("unauthenticated DeleteMirror: %d %v", resp.ErrorCode, resp.ErrorMessage)
	}
	if _, ok := f.handled.Load(protocol.KeyDeleteMirror); ok {
		t.Fatal("the DeleteMirror handler ran for an unauthenticated client")
	}

	// A SaslHandshake v0 is refused (its tokens would be unframed).
	hs := roundTrip(t, c, &kmsg.SASLHandshakeRequest{Version: 0, Mechanism: "PLAIN"}, 8).(*kmsg.SASLHandshakeResponse)
	if hs.ErrorCode != errUnsupportedVer {
		t.Fatalf("SaslHandshake v0 answered %d, want UNSUPPORTED_VERSION", hs.ErrorCode)
	}
}

// authzDescribeScopes: bob may describe t1 only, so describe and list show t1 alone and
// reading t2 is refused; admin (DESCRIBE on CLUSTER) sees everything.
func authzDescribeScopes(t *testing.T, bob, admin *kgo.Client) {
	t.Helper()
	_, _, r := mirrorCall(t, bob, &protocol.DescribeMirrorsRequest{})
	d := r.(*protocol.DescribeMirrorsResponse)
	if len(d.Mirrors) != 1 || len(d.Mirrors[0].Topics) != 1 || d.Mirrors[0].Topics[0].Name != "t1" || d.Mirrors[0].Groups != nil {
		t.Fatalf("bob's describe: %+v", d.Mirrors)
	}
	_, _, r = mirrorCall(t, bob, &protocol.ListMirrorsRequest{})
	if l := r.(*protocol.ListMirrorsResponse); len(l.Mirrors) != 1 || l.Mirrors[0].TopicCount != 1 || l.Mirrors[0].TopicNames != nil {
		t.Fatalf("bob's list: %+v", l.Mirrors)
	}
	code, msg, _ := mirrorCall(t, bob, &protocol.ReadMirrorStateRequest{MirrorName: "m", Topics: []protocol.TopicPartitions{{Name: "t2"}}})
	if code != 29 || msg != "DESCRIBE on CLUSTER, or DESCRIBE on TOPIC t2, is required to read the state of mirror m (principal User:bob)" {
		t.Fatalf("bob reads t2: %d %q", code, msg)
	}
	// admin (DESCRIBE on CLUSTER) sees everything.
	_, _, r = mirrorCall(t, admin, &protocol.DescribeMirrorsRequest{})
	if d := r.(*protocol.DescribeMirrorsResponse); len(d.Mirrors[0].Topics) != 2 || d.Mirrors[0].Groups == nil {
		t.Fatalf("admin's describe: %+v", d.Mirrors)
	}
}

// authzMirrorConfigsRefused: alice may not alter a mirror's config resources.
func authzMirrorConfigsRefused(t *testing.T, f *authzFixture, alice *kgo.Client) {
	t.Helper()
	f.p.SetConfigResources(func(key, version int16, body []byte) (func(context.Context) kmsg.Response, bool) {
		return func(context.Context) kmsg.Response { return kmsg.NewPtrIncrementalAlterConfigsResponse() }, key == 44
	})
	iac := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = 64, "m"
	iac.Resources = append(iac.Resources, res)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ir, err := iac.RequestWith(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if len(ir.Resources) != 1 || ir.Resources[0].ErrorCode != errClusterAuthorizationFailed ||
		*ir.Resources[0].ErrorMessage != "ALTER on CLUSTER is required to alter the configs of mirror m (principal User:alice)" {
		t.Fatalf("alice alters mirror configs: %+v", ir.Resources)
	}
}

// authzAuditedAndCounted checks what TestAuthzKfakeSASL's decisions left behind: one audit
// line per decision, with principal and client address and no secrets, and every refusal
// counted by API and reason.
func authzAuditedAndCounted(t *testing.T, f *authzFixture) {
	t.Helper()
	// Audit: one line per decision, with principal and client address, no secrets.
	events := f.audit.events(t)
	want := []struct{ api, principal, decision string }{
		{"DeleteMirror", "", audit.Refused},
		{"RemoveTopicsFromMirror", "User:alice", audit.Refused},
		{"RemoveTopicsFromMirror", "User:admin", audit.Allowed},
		{"WriteMirrorState", "User:admin", audit.Refused},
	}
	if len(events) < len(want) {
		t.Fatalf("%d audit lines, want at least %d", len(events), len(want))
	}
	for i, w := range want {
		e := events[i]
		if e.API != w.api || e.Principal != w.principal || e.Decision != w.decision || e.Client == "" || e.Mirror != "m" {
			t.Errorf("audit line %d: %+v, want %+v", i, e, w)
		}
	}
	raw := f.audit.String()
	if strings.Contains(raw, "secret") {
		t.Fatal("an audit line carries a password")
	}

	// Refusals are counted by API and reason.
	body := scrapeMetrics(t, f.p)
	for _, line := range []string{
		`kmirror_proxy_refusals_total{api="DeleteMirror",reason="unauthenticated"} 1`,
		`kmirror_proxy_refusals_total{api="RemoveTopicsFromMirror",reason="unauthorized"} 1`,
		`kmirror_proxy_refusals_total{api="WriteMirrorState",reason="not_served"} 1`,
		`kmirror_proxy_refusals_total{api="SASLHandshake",reason="sasl_handshake_v0"} 1`,
	} {
		if !strings.Contains(body, line) {
			t.Errorf("metrics lack %s", line)
		}
	}
}

func scrapeMetrics(t *testing.T, p *Proxy) string {
	t.Helper()
	body, err := metricstest.Scrape(p.MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestAuthzMTLSPolicy: where the proxy terminates mutual TLS, the local mtls_policy decides
// by the client certificate's subject.
func TestAuthzMTLSPolicy(t *testing.T) {
	pki := newTestPKI(t)
	trusted := tlstest.NewCA(t, "client CA")
	clientCA := filepath.Join(t.TempDir(), "client-ca.pem")
	if err := os.WriteFile(clientCA, trusted.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	issue := func(ca *tlstest.CA, cn string) tls.Certificate {
		certPEM, keyPEM := ca.Issue(t, cn, nil, nil, x509.ExtKeyUsageClientAuth)
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	kc := startKfake(t, 1)
	var handled sync.Map
	p := startProxy(t, kc.ListenAddrs(), func(cfg *Config) {
		cfg.TLS = ListenerTLS{CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: clientCA}
		cfg.MTLSPolicy = []MTLSGrant{
			{Principal: "User:CN=ops", Operations: []string{"alter", "describe", "create"}},
			{Principal: "User:CN=client", Operations: []string{"describe"}},
		}
	})
	if p.cfg.ClientAuth != ClientAuthMTLS {
		t.Fatalf("client_auth defaulted to %q with a client CA, want mtls", p.cfg.ClientAuth)
	}
	registerCannedHandlers(p, &handled)
	client := func(cert tls.Certificate) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(p.AdvertisedAddr()), kgo.MaxVersions(protocol.KgoMaxVersions(nil)), kgo.RequestRetries(0),
			kgo.DialTLSConfig(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{cert}}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	reader := client(issue(trusted, "client"))
	ops := client(issue(trusted, "ops"))

	if code, msg, _ := mirrorCall(t, reader, &protocol.DeleteMirrorRequest{MirrorName: "m"}); code != 144 ||
		msg != "ALTER on CLUSTER is required to delete mirror m (principal User:CN=client)" {
		t.Fatalf("describe-only certificate deletes: %d %q", code, msg)
	}
	if code, _, _ := mirrorCall(t, reader, &protocol.ListMirrorsRequest{}); code != 0 {
		t.Fatalf("describe-only certificate lists: %d", code)
	}
	if code, msg, _ := mirrorCall(t, ops, &protocol.DeleteMirrorRequest{MirrorName: "m"}); code != 0 {
		t.Fatalf("ops certificate deletes: %d %q", code, msg)
	}
	if pr, _ := handled.Load(protocol.KeyDeleteMirror); pr != "User:CN=ops" {
		t.Fatalf("handler saw %v, want User:CN=ops", pr)
	}

	// A certificate the proxy does not trust never gets as far as a request.
	other := issue(tlstest.NewCA(t, "untrusted CA"), "ops")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client(other).Request(ctx, &protocol.DeleteMirrorRequest{MirrorName: "m"}); err == nil {
		t.Fatal("a certificate from an untrusted CA got an answer")
	}
}

// TestAuthzQuestionKeepsOrder: the proxy's authorisation question takes its request's
// place on the connection; pipelined forwarded and local requests are answered in order,
// and the question's own answer never reaches the client.
func TestAuthzQuestionKeepsOrder(t *testing.T) {
	kc := startKfake(t, 1)
	p := startProxy(t, kc.ListenAddrs())
	var handled sync.Map
	registerCannedHandlers(p, &handled)
	c := rawDial(t, p.AdvertisedAddr())
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	reqs := []kmsg.Request{
		&kmsg.MetadataRequest{Version: 12},
		&protocol.ListMirrorsRequest{},
		&kmsg.ApiVersionsRequest{Version: 3, ClientSoftwareName: "t", ClientSoftwareVersion: "1"},
		&protocol.DescribeMirrorsRequest{},
		&kmsg.MetadataRequest{Version: 12},
	}
	var out []byte
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("pipeline"))
	for i, r := range reqs {
		out = append(out, f.AppendRequest(nil, r, int32(100+i))...) // the formatter sizes from dst[0]
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		frame, err := readFrame(c, 1<<20)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if corr := int32(binary.BigEndian.Uint32(frame[4:])); corr != int32(100+i) {
			t.Fatalf("response %d has correlation id %d, want %d (%s)", i, corr, 100+i, protocol.APIName(r.Key()))
		}
	}
	if _, ok := handled.Load(protocol.KeyDescribeMirrors); !ok {
		t.Fatal("DescribeMirrors was not answered by its handler")
	}
}

func TestAuthzCache(t *testing.T) {
	now := time.Now()
	c := &cachedOps{at: now, generation: 3, asked: []string{"t1"}}
	switch {
	case !c.covers(now.Add(time.Second), 3, []string{"t1"}, false):
		t.Fatal("a fresh answer about t1 does not cover t1")
	case c.covers(now.Add(time.Second), 3, []string{"t2"}, false):
		t.Fatal("an answer about t1 covers t2")
	case c.covers(now.Add(time.Second), 3, nil, true):
		t.Fatal("an answer about t1 covers every topic")
	case c.covers(now.Add(time.Second), 4, []string{"t1"}, false):
		t.Fatal("an answer survives re-authentication")
	case c.covers(now.Add(authzCacheFor+time.Second), 3, []string{"t1"}, false):
		t.Fatal("an answer outlives authzCacheFor")
	}
	all := &cachedOps{at: now, allTopics: true}
	if !all.covers(now, 0, []string{"x"}, true) {
		t.Fatal("an answer about every topic does not cover x")
	}
}
