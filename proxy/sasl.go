package proxy

import (
	"bytes"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// SASL tracking (docs/SECURITY.md, "Who may call kmirror's RPCs"). A client authenticates
// end to end with its broker through the 1:1 upstream connection; the proxy only watches
// the exchange go by, to know whether the connection is authenticated before it answers
// anything itself, and under which name (for audit lines). It never decides that a client
// is authenticated from what the client sent: only a SaslAuthenticate response with error
// code 0 from the broker counts, and for SCRAM only the final one (server-final-message
// "v=..."). The password is never kept: PLAIN's auth bytes are read for the user name only.
//
// SaslHandshake v0 is refused: after it the client sends unframed SASL tokens, which the
// proxy would read as request headers. Every client since Kafka 1.0 uses v1.

// saslKeys are the API keys the tracker watches (the session's one branch per request).
const (
	keySaslHandshake    = 17
	keySaslAuthenticate = 36
)

// saslTracker is one connection's SASL state. Requests are seen by the client side, responses
// by the upstream reader, state by the mirror RPC goroutines: a mutex suffices, all of this
// is rare.
type saslTracker struct {
	mu            sync.Mutex
	offered       string // mechanism of the SaslHandshake request in flight
	mechanism     string // mechanism the broker accepted
	user          string // user name of the SaslAuthenticate exchange in flight
	authenticated bool
	principal     string    // "User:NAME" of the last successful exchange; "" if not visible
	expires       time.Time // zero: the broker gave no session lifetime
	generation    uint64    // bumped whenever the principal may have changed (authz cache)
}

// onRequest notes a SaslHandshake (17) or SaslAuthenticate (36) request body.
func (t *saslTracker) onRequest(key, version int16, body []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch key {
	case keySaslHandshake:
		req := kmsg.NewPtrSASLHandshakeRequest()
		req.SetVersion(version)
		t.offered = ""
		if req.ReadFrom(body) == nil {
			t.offered = strings.ToUpper(req.Mechanism)
		}
	case keySaslAuthenticate:
		req := kmsg.NewPtrSASLAuthenticateRequest()
		req.SetVersion(version)
		if req.ReadFrom(body) != nil {
			return // the broker refuses it; its response decides
		}
		mech := t.mechanism
		if t.offered != "" { // a pipelined handshake whose response is still on its way
			mech = t.offered
		}
		switch {
		case mech == "PLAIN":
			t.user = plainUser(req.SASLAuthBytes)
		case strings.HasPrefix(mech, "SCRAM-"):
			if u, ok := scramUser(req.SASLAuthBytes); ok {
				t.user = u // client-first-message; client-final leaves it
			}
		default:
			t.user = ""
		}
	}
}

// onResponse notes the broker's answer to a request onRequest saw. frame is the whole
// response frame with its size prefix.
func (t *saslTracker) onResponse(key, version int16, frame []byte, now time.Time) {
	_, body, err := splitResponse(frame, responseHeaderVersion(key, version))
	t.mu.Lock()
	defer t.mu.Unlock()
	switch key {
	case keySaslHandshake:
		resp := kmsg.NewPtrSASLHandshakeResponse()
		resp.SetVersion(version)
		if err == nil && resp.ReadFrom(body) == nil && resp.ErrorCode == 0 {
			t.mechanism = t.offered
		} else {
			t.mechanism = ""
		}
		t.offered = ""
	case keySaslAuthenticate:
		resp := kmsg.NewPtrSASLAuthenticateResponse()
		resp.SetVersion(version)
		if err != nil || resp.ReadFrom(body) != nil || resp.ErrorCode != 0 {
			// A failed (re-)authentication: the broker closes the connection; until it
			// does, nothing is answered locally.
			t.failLocked()
			return
		}
		if strings.HasPrefix(t.mechanism, "SCRAM-") && !bytes.HasPrefix(resp.SASLAuthBytes, []byte("v=")) {
			return // server-first-message: the exchange goes on (a re-authentication keeps the old state meanwhile)
		}
		if t.mechanism == "" {
			// SaslAuthenticate without an accepted handshake: a broker refuses that, so an
			// error-free answer is not evidence of anything.
			t.failLocked()
			return
		}
		t.authenticated = true
		t.principal = ""
		if t.user != "" {
			t.principal = "User:" + t.user
		}
		t.expires = time.Time{}
		if resp.SessionLifetimeMillis > 0 {
			t.expires = now.Add(time.Duration(resp.SessionLifetimeMillis) * time.Millisecond)
		}
		t.user = ""
		t.generation++
	}
}

func (t *saslTracker) failLocked() {
	t.authenticated, t.principal, t.user, t.expires = false, "", "", time.Time{}
	t.generation++
}

// state reports whether the connection is authenticated now, as whom, and the generation
// of that answer.
func (t *saslTracker) state(now time.Time) (authenticated bool, principal string, generation uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.authenticated && !t.expires.IsZero() && now.After(t.expires) {
		// KIP-368: past the session lifetime the broker accepts nothing but a
		// re-authentication on this connection.
		return false, "", t.generation
	}
	return t.authenticated, t.principal, t.generation
}

// plainUser is the authentication id of a PLAIN message ("authzid\0authcid\0passwd",
// RFC 4616); the password is not looked at, let alone kept.
func plainUser(b []byte) string {
	_, rest, ok := bytes.Cut(b, []byte{0})
	if !ok {
		return ""
	}
	user, _, ok := bytes.Cut(rest, []byte{0})
	if !ok {
		return ""
	}
	return string(user)
}

// scramUser is the user name of a SCRAM client-first-message ("n,,n=alice,r=nonce",
// RFC 5802, with '=2C' and '=3D' escapes); ok is false for any other message.
func scramUser(b []byte) (string, bool) {
	s := string(b)
	if !strings.HasPrefix(s, "n,") && !strings.HasPrefix(s, "y,") && !strings.HasPrefix(s, "p=") {
		return "", false
	}
	// gs2-header: cbind-flag "," [authzid] ","
	i := strings.IndexByte(s, ',')
	j := strings.IndexByte(s[i+1:], ',')
	if j < 0 {
		return "", false
	}
	bare := s[i+1+j+1:]
	name, _, _ := strings.Cut(bare, ",")
	if !strings.HasPrefix(name, "n=") {
		return "", false
	}
	return strings.NewReplacer("=2C", ",", "=3D", "=").Replace(name[2:]), true
}

// watchSASL hands a SaslHandshake or SaslAuthenticate request to the tracker and marks its
// response for inspection; a SaslHandshake v0 is answered here instead (see above).
func (s *session) watchSASL(h requestHeader, frame []byte, p *pending) chan []byte {
	if h.key == keySaslHandshake && h.version == 0 {
		s.p.metrics.refusal(h.key, reasonSASLv0)
		s.log.Info("SaslHandshake v0 refused: its unframed tokens cannot pass the proxy; use a client that sends v1 (Kafka 1.0 or later)")
		resp := kmsg.NewPtrSASLHandshakeResponse()
		resp.ErrorCode = errUnsupportedVer
		s.sasl.mu.Lock()
		s.sasl.failLocked()
		s.sasl.mu.Unlock()
		ch := make(chan []byte, 1)
		ch <- appendResponseFrame(nil, h.corrID, 0, resp.AppendTo(nil))
		return ch
	}
	s.sasl.onRequest(h.key, h.version, frame[4+h.bodyOff:])
	p.sasl = true
	return nil
}
