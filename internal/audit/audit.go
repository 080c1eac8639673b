// Package audit writes one structured line (JSON) per security-relevant
// decision of kmirror: every mirror RPC, whatever its outcome, and every
// request the proxy refuses on kmirror's own authority (unauthenticated,
// unauthorised, touching kmirror's internals). Operators feed these lines to
// their SIEM; they never contain secrets (no credentials, no request bodies).
package audit

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Decisions.
const (
	Allowed = "allowed"
	Refused = "refused"
)

// Event is one audited decision.
type Event struct {
	Time      time.Time `json:"time"`
	Client    string    `json:"client"`              // client address (behind a balancer: as the proxy sees it)
	Listener  string    `json:"listener"`            // bootstrap or broker-N
	Principal string    `json:"principal,omitempty"` // "User:alice" where known (SASL PLAIN/SCRAM, mTLS subject)
	API       string    `json:"api"`                 // e.g. CreateMirror, Produce
	APIKey    int16     `json:"api_key"`
	Mirror    string    `json:"mirror,omitempty"`
	Route     string    `json:"route,omitempty"` // SwitchRoute's route
	Topics    []string  `json:"topics,omitempty"`
	Decision  string    `json:"decision"`         // Allowed or Refused
	Reason    string    `json:"reason,omitempty"` // why refused (or what allowed it)
	ErrorCode int16     `json:"error_code,omitempty"`
}

// Logger writes events as JSON lines. A nil *Logger discards everything, so
// callers need no checks.
type Logger struct {
	mu  sync.Mutex
	w   io.Writer
	now func() time.Time
}

// New returns a Logger writing to w (for example os.Stderr or an opened file).
func New(w io.Writer) *Logger { return &Logger{w: w, now: time.Now} }

// Log writes e as one line; a zero Time is set to now. A write error is
// dropped: auditing must never stop the proxy answering (the line's absence
// is visible to whoever tails the sink).
func (l *Logger) Log(e Event) {
	if l == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = l.now().UTC()
	}
	b, err := json.Marshal(struct {
		Audit bool `json:"audit"`
		Event
	}{true, e})
	if err != nil {
		return
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(b)
}
