package proxy

import (
	"context"
	"net"
	"reflect"
	"sync"

	"github.com/kmirror/kmirror/protocol"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Mirror RPCs (API keys 1000..1011, table in protocol/apikeys.go) are answered by kmirror
// itself and are never forwarded: a stock broker does not know them. A key the destination
// advertises itself is not served (mirrorkeys.go). Until the coordinator
// registers a handler, every key answers its own response type with INVALID_REQUEST so that
// a client (or the kmirror CLI) gets a clear, typed error rather than a dropped connection.

const (
	errInvalidRequest = 42
	errUnsupportedVer = 35

	mirroringDisabledMessage = "mirroring is not enabled on this kmirror instance"
)

// MirrorRequest is a mirror RPC as the proxy received it. Body is the request body after the
// header (flexible, version Version); handlers decode it with the protocol package.
type MirrorRequest struct {
	Key           int16
	Version       int16
	CorrelationID int32
	Body          []byte
	ClientAddr    net.Addr
	// Principal is the client's principal where the proxy knows it ("User:alice" from
	// SASL PLAIN/SCRAM or the client certificate; "" otherwise). The proxy authorised the
	// request before the handler runs (authz.go).
	Principal string
}

// Handler answers one mirror RPC. A returned error becomes the key's response carrying
// protocol.ErrorCodeAndMessage(err): return a *protocol.Error for a specific code.
type Handler func(ctx context.Context, req *MirrorRequest) (kmsg.Response, error)

// Handlers is the registry of local mirror RPC handlers. It is safe for concurrent use and
// may be filled after the proxy started (mirroring can be enabled at runtime).
type Handlers struct {
	mu sync.RWMutex
	m  map[int16]Handler
}

// Register installs fn for API key key, replacing any earlier handler.
func (h *Handlers) Register(key int16, fn Handler) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[int16]Handler)
	}
	h.m[key] = fn
}

func (h *Handlers) lookup(key int16) Handler {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.m[key]
}

// mirrorErrorBody encodes the key's own v0 response carrying only an error code and
// message (every mirror response starts ThrottleTimeMs, ErrorCode, ErrorMessage).
func mirrorErrorBody(key int16, code int16, msg string) []byte {
	resp := protocol.ResponseForKey(key)
	v := reflect.ValueOf(resp).Elem()
	v.FieldByName("ErrorCode").SetInt(int64(code))
	v.FieldByName("ErrorMessage").Set(reflect.ValueOf(&msg))
	return resp.AppendTo(nil)
}

// mirrorAPIKeys is what every listener advertises for the mirror RPCs in ApiVersions: the
// mirror table minus the keys that collide with the destination's.
func (p *Proxy) mirrorAPIKeys() []kmsg.ApiVersionsResponseApiKey {
	if p.appRoute != nil {
		return nil // a route's upstream is not the destination (route.go)
	}
	var keys []kmsg.ApiVersionsResponseApiKey
	for _, api := range protocol.MirrorAPIs() {
		if !p.servesMirrorKey(api.Key) {
			continue
		}
		keys = append(keys, kmsg.ApiVersionsResponseApiKey{ApiKey: api.Key, MinVersion: api.MinVersion, MaxVersion: api.MaxVersion})
	}
	return keys
}
