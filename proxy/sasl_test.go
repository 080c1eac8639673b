package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// saslFeed drives a tracker the way a session does.
type saslFeed struct {
	t   *saslTracker
	now time.Time
}

func (f saslFeed) handshake(mech string, errCode int16) {
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.SetVersion(1)
	req.Mechanism = mech
	f.t.onRequest(keySaslHandshake, 1, req.AppendTo(nil))
	resp := kmsg.NewPtrSASLHandshakeResponse()
	resp.SetVersion(1)
	resp.ErrorCode = errCode
	f.t.onResponse(keySaslHandshake, 1, appendResponseFrame(nil, 1, 0, resp.AppendTo(nil)), f.now)
}

func (f saslFeed) authenticate(version int16, auth []byte, errCode int16, serverBytes string, lifetimeMs int64) {
	req := kmsg.NewPtrSASLAuthenticateRequest()
	req.SetVersion(version)
	req.SASLAuthBytes = auth
	f.t.onRequest(keySaslAuthenticate, version, req.AppendTo(nil))
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.SetVersion(version)
	resp.ErrorCode = errCode
	resp.SASLAuthBytes = []byte(serverBytes)
	resp.SessionLifetimeMillis = lifetimeMs
	f.t.onResponse(keySaslAuthenticate, version, appendResponseFrame(nil, 2, responseHeaderVersion(keySaslAuthenticate, version), resp.AppendTo(nil)), f.now)
}

func (f saslFeed) want(t *testing.T, step string, authenticated bool, principal string) {
	t.Helper()
	a, p, _ := f.t.state(f.now)
	if a != authenticated || p != principal {
		t.Fatalf("%s: state (%v, %q), want (%v, %q)", step, a, p, authenticated, principal)
	}
}

func TestSASLTrackerPLAIN(t *testing.T) {
	f := saslFeed{t: &saslTracker{}, now: time.Now()}
	f.want(t, "before anything", false, "")
	f.handshake("PLAIN", 0)
	f.want(t, "after the handshake", false, "")
	f.authenticate(2, []byte("\x00alice\x00alice-secret"), 0, "", 0)
	f.want(t, "after PLAIN success", true, "User:alice")
	if strings.Contains(f.t.principal+f.t.user+f.t.offered+f.t.mechanism, "secret") {
		t.Fatal("the tracker kept the password")
	}
	// KIP-368 re-authentication as someone else, then a failed one.
	f.handshake("PLAIN", 0)
	f.authenticate(2, []byte("\x00bob\x00bob-secret"), 0, "", 0)
	f.want(t, "after re-authentication", true, "User:bob")
	f.handshake("PLAIN", 0)
	f.authenticate(2, []byte("\x00bob\x00wrong"), 58, "", 0)
	f.want(t, "after a failed re-authentication", false, "")
}

func TestSASLTrackerSCRAM(t *testing.T) {
	f := saslFeed{t: &saslTracker{}, now: time.Now()}
	f.handshake("SCRAM-SHA-512", 0)
	f.authenticate(1, []byte("n,,n=al=2Cice,r=abc"), 0, "r=abcdef,s=c2FsdA==,i=4096", 0)
	f.want(t, "after server-first", false, "")
	f.authenticate(1, []byte("c=biws,r=abcdef,p=cHJvb2Y="), 0, "v=c2lnbmF0dXJl", 60_000)
	f.want(t, "after server-final", true, "User:al,ice")

	// A session lifetime (KIP-368) ends the authenticated state unless renewed.
	later := saslFeed{t: f.t, now: f.now.Add(61 * time.Second)}
	later.want(t, "past the session lifetime", false, "")

	// The broker refusing the final message is a failure whatever came before.
	g := saslFeed{t: &saslTracker{}, now: time.Now()}
	g.handshake("SCRAM-SHA-256", 0)
	g.authenticate(1, []byte("n,,n=alice,r=abc"), 0, "r=abcdef,s=c2FsdA==,i=4096", 0)
	g.authenticate(1, []byte("c=biws,r=abcdef,p=bad"), 58, "", 0)
	g.want(t, "after a refused client-final", false, "")
}

func TestSASLTrackerNeedsBrokerSuccess(t *testing.T) {
	// A SaslAuthenticate whose handshake the broker refused, or that came without one,
	// proves nothing even if an error-free answer came back.
	f := saslFeed{t: &saslTracker{}, now: time.Now()}
	f.handshake("GSSAPI", 33)
	f.authenticate(1, []byte("\x00alice\x00x"), 0, "", 0)
	f.want(t, "after a refused handshake", false, "")

	// Other mechanisms (OAUTHBEARER) count on the broker's success, principal unknown.
	f.handshake("OAUTHBEARER", 0)
	f.authenticate(1, []byte("n,,\x01auth=Bearer xyz\x01\x01"), 0, "", 0)
	f.want(t, "after OAUTHBEARER success", true, "")
}

func TestSASLUserParsing(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"\x00alice\x00pw", "alice"}, {"alice\x00alice\x00pw", "alice"}, {"alice", ""}, {"\x00alice", ""},
	} {
		if got := plainUser([]byte(c.in)); got != c.want {
			t.Errorf("plainUser(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"n,,n=alice,r=x", "alice", true}, {"n,a=bob,n=bob,r=x", "bob", true}, {"y,,n=a=3Db,r=x", "a=b", true},
		{"c=biws,r=x,p=y", "", false}, {"n,", "", false}, {"n,,r=x", "", false},
	} {
		got, ok := scramUser([]byte(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("scramUser(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// FuzzSASLTracker: any sequence of SASL request and response bytes never panics, and the
// tracker says "authenticated" only when the last SaslAuthenticate response it saw was a
// well-formed success from the broker. Each event is a kind byte and a length-prefixed
// payload: kind%4 0 handshake request, 1 handshake response body, 2 authenticate request,
// 3 authenticate response body; kind/4%3 is the authenticate version.
func FuzzSASLTracker(f *testing.F) {
	ev := func(kind byte, payload []byte) []byte { return append([]byte{kind, byte(len(payload))}, payload...) }
	hsReq := kmsg.SASLHandshakeRequest{Version: 1, Mechanism: "PLAIN"}
	hsResp := kmsg.SASLHandshakeResponse{Version: 1}
	auReq := kmsg.SASLAuthenticateRequest{Version: 0, SASLAuthBytes: []byte("\x00alice\x00pw")}
	auOK := kmsg.SASLAuthenticateResponse{Version: 0}
	auBad := kmsg.SASLAuthenticateResponse{Version: 0, ErrorCode: 58}
	var seed []byte
	seed = append(seed, ev(0, hsReq.AppendTo(nil))...)
	seed = append(seed, ev(1, hsResp.AppendTo(nil))...)
	seed = append(seed, ev(2, auReq.AppendTo(nil))...)
	f.Add(append(seed, ev(3, auOK.AppendTo(nil))...))
	f.Add(append(append(seed, ev(3, auOK.AppendTo(nil))...), ev(3, auBad.AppendTo(nil))...))
	scram := kmsg.SASLHandshakeRequest{Version: 1, Mechanism: "SCRAM-SHA-512"}
	first := kmsg.SASLAuthenticateResponse{Version: 0, SASLAuthBytes: []byte("r=x,s=y,i=1")}
	final := kmsg.SASLAuthenticateResponse{Version: 0, SASLAuthBytes: []byte("v=z")}
	f.Add(append(append(append(ev(0, scram.AppendTo(nil)), ev(1, hsResp.AppendTo(nil))...), ev(3, first.AppendTo(nil))...), ev(3, final.AppendTo(nil))...))
	f.Add([]byte{3, 2, 0, 0, 7, 0})

	f.Fuzz(func(t *testing.T, data []byte) {
		tr := &saslTracker{}
		now := time.Unix(1e9, 0)
		lastOK := false
		for len(data) >= 2 {
			kind, n := data[0], int(data[1])
			data = data[2:]
			n = min(n, len(data))
			payload := data[:n]
			data = data[n:]
			version := int16(kind / 4 % 3)
			switch kind % 4 {
			case 0:
				tr.onRequest(keySaslHandshake, 1, payload)
			case 1:
				tr.onResponse(keySaslHandshake, 1, appendResponseFrame(nil, 1, 0, payload), now)
			case 2:
				tr.onRequest(keySaslAuthenticate, version, payload)
			case 3:
				hv := responseHeaderVersion(keySaslAuthenticate, version)
				tr.onResponse(keySaslAuthenticate, version, appendResponseFrame(nil, 1, hv, payload), now)
				resp := kmsg.SASLAuthenticateResponse{Version: version}
				lastOK = resp.ReadFrom(payload) == nil && resp.ErrorCode == 0
			}
			if a, p, _ := tr.state(now); a && !lastOK {
				t.Fatalf("authenticated (%q) without a success response last", p)
			} else if strings.ContainsRune(p, 0) {
				t.Fatalf("principal %q carries a NUL: part of a PLAIN message leaked", p)
			}
		}
	})
}
