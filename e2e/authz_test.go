package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/kmirror/kmirror/internal/syncbuf"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/audit"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
	"github.com/kmirror/kmirror/proxy"
)

// TestAuthzMatrixReal: every mirror RPC and both mirror-config requests, each sent through
// the proxy by an unauthenticated client, by alice (READ, WRITE, DESCRIBE on every topic,
// nothing on CLUSTER) and by admin (super user), in front of a real SASL destination with
// the StandardAuthorizer. Only the allowed cells succeed; every refusal carries the code and
// message docs/SECURITY.md documents, and is audited.
func TestAuthzMatrixReal(t *testing.T) {
	src := kafkatest.Start(t)
	// Sessions expire after 10 s (KIP-368): franz-go re-authenticates on the same
	// connections, which the proxy must follow.
	dst := kafkatest.Start(t, kafkatest.WithSASL(), kafkatest.ServerProperty("connections.max.reauth.ms", "10000"))
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	in := startSASLInstance(t, dst, auditPath)
	addr := in.Proxy.AdvertisedAddr()
	src.CreateKeptTopic(t, "orders", 1)
	produce(t, src, "orders", 1, 20, kgo.NoCompression())

	admin := saslClient(t, dst, addr, kafkatest.AdminUser)
	alice := saslClient(t, dst, addr, kafkatest.AliceUser)
	unauth := &rawClient{t: t, addr: addr}

	refusedAll := func(api, what string) [3]authzCell {
		return [3]authzCell{{58, fmt.Sprintf(authzUnauthMsg, api)}, {144, fmt.Sprintf(authzAlterMsg, what)}, {0, ""}}
	}
	readable := func(api string) [3]authzCell {
		return [3]authzCell{{58, fmt.Sprintf(authzUnauthMsg, api)}, {0, ""}, {0, ""}}
	}
	createReq := protocol.NewPtrCreateMirrorRequest()
	createReq.MirrorName = "m"
	createReq.Configs = []protocol.CreateMirrorRequestConfig{{Name: "bootstrap.servers", Value: kmsg.StringPtr(src.BootstrapString())}}
	addReq := protocol.NewPtrAddTopicsToMirrorRequest()
	addReq.MirrorName = "m"
	addReq.Topics = []protocol.AddTopicsToMirrorRequestTopic{{Name: "orders", NumPartitions: -1}}
	topics := []protocol.TopicName{{Name: "orders"}}
	parts := []protocol.TopicPartitions{{Name: "orders", Partitions: []int32{0}}}

	// Steps run in this order (admin's success of one is the next one's precondition);
	// within a step unauthenticated, alice, then admin.
	steps := []authzStep{
		{createReq, refusedAll("CreateMirror", "create mirror m"), nil},
		{addReq, [3]authzCell{{58, fmt.Sprintf(authzUnauthMsg, "AddTopicsToMirror")},
			{144, "ALTER on CLUSTER is required to add topics to mirror m (an add creates the destination topics) (principal User:alice)"}, {0, ""}},
			func() { waitMirrored(t, admin, "m", map[string]int64{"orders": 20}) }},
		{&protocol.ListMirrorsRequest{IncludeTopicNames: true}, readable("ListMirrors"), nil},
		{&protocol.DescribeMirrorsRequest{MirrorNames: []string{"m"}}, readable("DescribeMirrors"), nil},
		{&protocol.LastMirroredOffsetsRequest{MirrorName: "m", Topics: parts}, readable("LastMirroredOffsets"), nil},
		{&protocol.ReadMirrorStateRequest{MirrorName: "m", Topics: parts}, readable("ReadMirrorState"), nil},
		{&protocol.WriteMirrorStateRequest{MirrorName: "m"}, [3]authzCell{{58, fmt.Sprintf(authzUnauthMsg, "WriteMirrorState")},
			{144, writeRefusal}, {144, writeRefusal}}, nil},
		{&protocol.PauseMirrorTopicsRequest{MirrorName: "m", Topics: topics}, refusedAll("PauseMirrorTopics", "pause topics of mirror m"),
			func() { waitState(t, admin, "m", "PAUSED") }},
		{&protocol.ResumeMirrorTopicsRequest{MirrorName: "m", Topics: topics}, refusedAll("ResumeMirrorTopics", "resume topics of mirror m"), nil},
		{&protocol.RemoveTopicsFromMirrorRequest{MirrorName: "m", Topics: topics}, refusedAll("RemoveTopicsFromMirror", "fail over mirror m"),
			func() { waitState(t, admin, "m", "STOPPED") }},
		{describeMirrorConfigs("m"), [3]authzCell{{58, fmt.Sprintf(authzUnauthMsg, "DescribeConfigs")},
			{31, "DESCRIBE on CLUSTER is required to describe the configs of mirror m (principal User:alice)"}, {0, ""}}, nil},
		{alterMirrorConfigs("m"), [3]authzCell{{58, fmt.Sprintf(authzUnauthMsg, "IncrementalAlterConfigs")},
			{31, "ALTER on CLUSTER is required to alter the configs of mirror m (principal User:alice)"}, {0, ""}}, nil},
		{&protocol.DeleteMirrorRequest{MirrorName: "m"}, refusedAll("DeleteMirror", "delete mirror m"), nil},
		// A route switch fails a mirror over: ALTER on CLUSTER, like --remove. This instance
		// serves no route, so admin's request reaches the handler and is refused there.
		{&protocol.SwitchRouteRequest{RouteName: "app"}, [3]authzCell{{58, fmt.Sprintf(authzUnauthMsg, "SwitchRoute")},
			{144, fmt.Sprintf(authzAlterMsg, "switch route app (it fails the route's mirror over)")},
			{protocol.ErrInvalidRequest.Code, ""}}, nil},
	}
	cells := runAuthzMatrix(t, unauth, alice, admin, steps)
	cells = append(cells, checkReauthentication(t, in, dst, addr, alice, admin, topics)...)
	checkAuditFile(t, auditPath, dst, cells)
}

// The messages of the matrix's refusals: an unauthenticated client's, naming the API, and
// alice's where ALTER on CLUSTER is required, naming what she asked.
const (
	authzUnauthMsg = "%s refused: this kmirror answers only SASL-authenticated connections; authenticate with the destination's SASL mechanism first"
	authzAlterMsg  = "ALTER on CLUSTER is required to %s (principal User:alice)"
)

// authzCell is the answer one client must get to one request of the matrix.
type authzCell struct {
	code int16
	msg  string // "" for success
}

// authzStep is one request of the matrix: what the unauthenticated client, alice and admin
// must get, in that order, and what to wait for after it.
type authzStep struct {
	req   kmsg.Request
	cells [3]authzCell
	after func() // before the next step, as admin
}

// authzWho names the matrix's clients in the order of a step's cells.
var authzWho = []string{"unauthenticated", "alice", "admin"}

// runAuthzMatrix sends each step's request as the unauthenticated client, alice and admin,
// in that order, checks each answer against its cell, and returns the audit event each
// answer must have left.
func runAuthzMatrix(t *testing.T, unauth *rawClient, alice, admin *kgo.Client, steps []authzStep) []audit.Event {
	t.Helper()
	principals := []string{"", "User:alice", "User:admin"}
	var cells []audit.Event
	for _, st := range steps {
		api := protocol.APIName(st.req.Key())
		for i, send := range []func(kmsg.Request) kmsg.Response{unauth.request, kgoRequest(t, alice), kgoRequest(t, admin)} {
			code, msg := outcome(send(st.req))
			want := st.cells[i]
			if code != want.code || (want.msg != "" && msg != want.msg) {
				t.Errorf("%s as %s: %d %q, want %d %q", api, authzWho[i], code, msg, want.code, want.msg)
			}
			e := audit.Event{API: api, Principal: principals[i], Decision: audit.Allowed, ErrorCode: code, Reason: want.msg}
			if want.msg != "" {
				e.Decision = audit.Refused
			}
			cells = append(cells, e)
		}
		if st.after != nil {
			st.after()
		}
	}
	return cells
}

// checkReauthentication checks that alice and admin keep their answers while their
// sessions expire and renew, and that alice authenticated over PLAIN is refused as alice.
// It returns the audit events its requests must have left.
func checkReauthentication(t *testing.T, in *instance.Instance, dst *kafkatest.Cluster, addr string, alice, admin *kgo.Client,
	topics []protocol.TopicName) []audit.Event {
	t.Helper()
	// Re-authentication (KIP-368): franz-go re-authenticates before its next request once
	// the 10 s session nears its end; the proxy follows, so the clients keep their answers
	// through it and after it.
	before := saslAuthenticates(t, in)
	polltest.Eventually(t, time.Minute, "clients re-authenticated", func() (bool, string) {
		for i, cl := range []*kgo.Client{alice, admin} {
			if code, msg := outcome(kgoRequest(t, cl)(&protocol.ListMirrorsRequest{})); code != 0 {
				t.Fatalf("%s while sessions expire and renew: %d %q", authzWho[i+1], code, msg)
			}
		}
		n := saslAuthenticates(t, in)
		return n >= before+4, fmt.Sprintf("%d SaslAuthenticate requests, %d before", n, before) // SCRAM: 2 per exchange
	})
	if code, msg := outcome(kgoRequest(t, alice)(&protocol.DeleteMirrorRequest{MirrorName: "m2"})); code != 144 ||
		msg != fmt.Sprintf(authzAlterMsg, "delete mirror m2") {
		t.Errorf("alice after re-authentication: %d %q", code, msg)
	}
	if code, msg := outcome(kgoRequest(t, admin)(&protocol.DeleteMirrorRequest{MirrorName: "m2"})); code != protocol.ErrUnknownMirror.Code {
		t.Errorf("admin after re-authentication: %d %q, want UNKNOWN_MIRROR", code, msg)
	}
	// PLAIN: the proxy reads the user name from the message, never the password.
	alicePlain := kafkatest.NewClient(t, []string{addr}, append(dst.UserOptsMechanism(kafkatest.AliceUser, kafkatest.MechanismPLAIN),
		kgo.MaxVersions(protocol.KgoMaxVersions(nil)))...)
	if code, msg := outcome(kgoRequest(t, alicePlain)(&protocol.PauseMirrorTopicsRequest{MirrorName: "m2", Topics: topics})); code != 144 ||
		msg != fmt.Sprintf(authzAlterMsg, "pause topics of mirror m2") {
		t.Errorf("alice over PLAIN: %d %q", code, msg)
	}
	return []audit.Event{{API: "PauseMirrorTopics", Principal: "User:alice", Decision: audit.Refused, ErrorCode: 144},
		{API: "DeleteMirror", Principal: "User:alice", Decision: audit.Refused, ErrorCode: 144},
		{API: "DeleteMirror", Principal: "User:admin", Decision: audit.Allowed, ErrorCode: protocol.ErrUnknownMirror.Code}}
}

// checkAuditFile checks the audit log at auditPath: a line per decision (cells), a few
// lines checked whole, and no user's password anywhere in it.
func checkAuditFile(t *testing.T, auditPath string, dst *kafkatest.Cluster, cells []audit.Event) {
	t.Helper()
	// The audit file has a line per decision; a few cells checked whole.
	events := readAudit(t, auditPath)
	for _, w := range []audit.Event{
		{API: "CreateMirror", Decision: audit.Refused, ErrorCode: 58, Mirror: "m"},
		{API: "RemoveTopicsFromMirror", Principal: "User:alice", Decision: audit.Refused, ErrorCode: 144, Mirror: "m",
			Topics: []string{"orders"}, Reason: fmt.Sprintf(authzAlterMsg, "fail over mirror m")},
		{API: "RemoveTopicsFromMirror", Principal: "User:admin", Decision: audit.Allowed, Mirror: "m", Topics: []string{"orders"}, Reason: "ALTER on CLUSTER"},
		{API: "WriteMirrorState", Principal: "User:admin", Decision: audit.Refused, ErrorCode: 144, Mirror: "m", Reason: writeRefusal},
		{API: "SwitchRoute", Principal: "User:alice", Decision: audit.Refused, ErrorCode: 144, Route: "app"},
	} {
		if !hasEvent(events, w) {
			t.Errorf("no audit line %+v", w)
		}
	}
	for _, w := range cells {
		if !hasEvent(events, w) {
			t.Errorf("no audit line for the cell %+v", w)
		}
	}
	raw, _ := os.ReadFile(auditPath)
	for _, user := range []string{kafkatest.AdminUser, kafkatest.AliceUser, kafkatest.KmirrorUser} {
		if strings.Contains(string(raw), dst.Password(user)) {
			t.Fatalf("the audit log carries %s's password", user)
		}
	}
}

const writeRefusal = "WriteMirrorState is never accepted from a client: kmirror instances write __mirror_state themselves, fenced by their writer epoch; use pause, resume or remove to change a mirror topic's state"

// startSASLInstance runs kmirror in front of a SASL destination, writing its audit log to
// auditPath.
func startSASLInstance(t *testing.T, dst *kafkatest.Cluster, auditPath string) *instance.Instance {
	t.Helper()
	return instancetest.Start(t, dst, nil, func(cfg *instance.Config) { cfg.Proxy.AuditLog = auditPath })
}

func kgoRequest(t *testing.T, cl *kgo.Client) func(kmsg.Request) kmsg.Response {
	return func(req kmsg.Request) kmsg.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := cl.Request(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", protocol.APIName(req.Key()), err)
		}
		return resp
	}
}

// rawClient sends requests on a plain TCP connection that never authenticates.
type rawClient struct {
	t    *testing.T
	addr string
	conn net.Conn
	br   *bufio.Reader
	corr int32
}

func (c *rawClient) request(req kmsg.Request) kmsg.Response {
	t := c.t
	t.Helper()
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		c.conn, c.br = conn, bufio.NewReader(conn)
	}
	if req.GetVersion() == 0 && req.MaxVersion() > 0 && !protocol.IsMirrorKey(req.Key()) {
		req.SetVersion(req.MaxVersion())
	}
	c.corr++
	_ = c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("unauthenticated")).AppendRequest(nil, req, c.corr)
	if _, err := c.conn.Write(frame); err != nil {
		t.Fatalf("%s: %v", protocol.APIName(req.Key()), err)
	}
	var size [4]byte
	if _, err := io.ReadFull(c.br, size[:]); err != nil {
		t.Fatalf("%s: reading response: %v", protocol.APIName(req.Key()), err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.br, body); err != nil {
		t.Fatalf("%s: reading response: %v", protocol.APIName(req.Key()), err)
	}
	body = body[4:] // correlation id
	if req.IsFlexible() {
		body = body[1:] // no header tags
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		t.Fatalf("%s: decoding response: %v", protocol.APIName(req.Key()), err)
	}
	return resp
}

// outcome is a response's error: the top-level one, or the first config resource's.
func outcome(resp kmsg.Response) (int16, string) {
	switch r := resp.(type) {
	case *kmsg.DescribeConfigsResponse:
		return r.Resources[0].ErrorCode, deref(r.Resources[0].ErrorMessage)
	case *kmsg.IncrementalAlterConfigsResponse:
		return r.Resources[0].ErrorCode, deref(r.Resources[0].ErrorMessage)
	}
	b, _ := json.Marshal(resp)
	var top struct {
		ErrorCode    int16
		ErrorMessage *string
	}
	_ = json.Unmarshal(b, &top)
	return top.ErrorCode, deref(top.ErrorMessage)
}

func describeMirrorConfigs(mirror string) kmsg.Request {
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName = 64, mirror
	req.Resources = append(req.Resources, res)
	return req
}

func alterMirrorConfigs(mirror string) kmsg.Request {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = 64, mirror
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value = "replication.throttled.rate", kmsg.StringPtr("10000000")
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	return req
}

// waitState polls until every partition of the mirror is in state.
func waitState(t *testing.T, cl *kgo.Client, mirror, state string) {
	t.Helper()
	polltest.Eventually(t, 2*time.Minute, "mirror "+mirror+" "+state, func() (bool, string) {
		resp := kgoRequest(t, cl)(&protocol.DescribeMirrorsRequest{MirrorNames: []string{mirror}}).(*protocol.DescribeMirrorsResponse)
		var states []string
		for _, m := range resp.Mirrors {
			for _, tp := range m.Topics {
				for _, p := range tp.Partitions {
					states = append(states, p.State)
				}
			}
		}
		for _, s := range states {
			if s != state {
				return false, strings.Join(states, ",")
			}
		}
		return len(states) > 0, strings.Join(states, ",")
	})
}

func readAudit(t *testing.T, path string) []audit.Event {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Event
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e audit.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

func hasEvent(events []audit.Event, w audit.Event) bool {
	for _, e := range events {
		if e.API == w.API && e.Principal == w.Principal && e.Decision == w.Decision && e.ErrorCode == w.ErrorCode &&
			(w.Mirror == "" || e.Mirror == w.Mirror) && (w.Route == "" || e.Route == w.Route) && (w.Topics == nil || strings.Join(e.Topics, ",") == strings.Join(w.Topics, ",")) &&
			(w.Reason == "" || e.Reason == w.Reason) && e.Client != "" && e.Listener != "" {
			return true
		}
	}
	return false
}

// TestAuthzNoAuthorizerReal: a destination without an authoriser (PLAINTEXT, no ACLs)
// reports every operation allowed, so with client_auth none (the default there) an anonymous
// client's mirror RPCs pass, as the broker would let it do anything; start-up says so.
func TestAuthzNoAuthorizerReal(t *testing.T) {
	dst := kafkatest.Start(t)
	logs := &syncbuf.Buffer{}
	in := instancetest.Start(t, dst, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	cl := admin(t, in.Proxy.AdvertisedAddr())
	r := request[*protocol.DeleteMirrorResponse](t, cl, &protocol.DeleteMirrorRequest{MirrorName: "nope"})
	if r.ErrorCode != protocol.ErrUnknownMirror.Code {
		t.Fatalf("anonymous DeleteMirror without an authoriser: %d %s, want UNKNOWN_MIRROR (past authorisation)", r.ErrorCode, deref(r.ErrorMessage))
	}
	polltest.Eventually(t, time.Minute, "the no-authoriser warning", func() (bool, string) {
		return strings.Contains(logs.String(), "destination has no authorizer: every authenticated client may change mirrors"), ""
	})
	if !strings.Contains(logs.String(), "client authentication: none") {
		t.Fatal("start-up did not say which client authentication applies")
	}
}

// saslAuthenticates is how many SaslAuthenticate requests the proxy has relayed.
func saslAuthenticates(t *testing.T, in *instance.Instance) int {
	t.Helper()
	b := scrape(t, in.Proxy.MetricsAddr())
	n := 0
	for _, line := range strings.Split(b, "\n") {
		if strings.HasPrefix(line, "kmirror_proxy_requests_total{") && strings.Contains(line, `api_key="36"`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			n += int(v)
		}
	}
	return n
}

// TestRouteDescribeNeedsDescribeOnClusterReal: describe's routes (what a route leads to, its
// switch, the driver) are the cluster operator's, like the mirror configs: in front of a real
// SASL destination with the StandardAuthorizer, alice (DESCRIBE on every topic, nothing on
// CLUSTER) is shown no route, and admin sees it; neither request fails.
func TestRouteDescribeNeedsDescribeOnClusterReal(t *testing.T) {
	primary := kafkatest.Start(t)
	dst := kafkatest.Start(t, kafkatest.WithSASL())
	in := instancetest.Start(t, dst, nil, func(cfg *instance.Config) {
		cfg.Proxy.Routes = []proxy.RouteConfig{{Name: "app", Listen: "127.0.0.1:0", Mirror: "dr",
			Primary: proxy.RouteUpstream{Bootstrap: primary.Bootstrap()}}}
	})
	addr := in.Proxy.AdvertisedAddr()
	for _, c := range []struct {
		user   string
		routes int
	}{{kafkatest.AliceUser, 0}, {kafkatest.AdminUser, 1}} {
		resp := request[*protocol.DescribeMirrorsResponse](t, saslClient(t, dst, addr, c.user), protocol.NewPtrDescribeMirrorsRequest())
		if resp.ErrorCode != 0 || len(resp.Routes) != c.routes {
			t.Errorf("describe as %s: error %d, %d routes %+v; want %d", c.user, resp.ErrorCode, len(resp.Routes), resp.Routes, c.routes)
		}
	}
}
