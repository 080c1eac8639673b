package protocol

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The API keys of the mirror RPCs (KeyCreateMirror = 1000 .. KeySwitchRoute
// = 1011) are in the definitions (definitions/*.def), generated into
// generated.go with the table of mirror RPCs (mirrorAPIs). The proposal's own
// keys will be assigned by Apache Kafka when it is accepted; until then
// kmirror must stay off Kafka's path.
//
// Why 1000..1011 (docs/proxy.md, "Mirror RPC keys"):
//   - Kafka assigns keys sequentially from 0 (94 in Kafka 4.3's generation,
//     UnregisterController) and adds a handful a year: at that pace 1000 is
//     centuries away, while the old range 94..104 was being taken now.
//   - The keys are small positive int16s. A client that keeps per-key arrays
//     sized by the highest key it knows, or that treats negative keys as
//     invalid, is unaffected: clients ignore keys they do not know in
//     ApiVersions (Java's NodeApiVersions keeps them in unknownApis, kgo and
//     kversion keep maps), and only a client that chose to send a mirror RPC
//     ever writes one of these keys.
//   - A round decimal base that is easy to spot in logs and captures.
//
// If a destination ever advertises a key in this range, the proxy stops
// serving that key (proxy/18_api_versions.go): a Kafka request is never
// answered with a mirror response.

// MinMirrorKey and MaxMirrorKey bound kmirror's key range (inclusive): the
// range the proxy advertises and checks upstream against. The generator
// refuses keys that are not contiguous, so every key between them is one.
const (
	MinMirrorKey = KeyCreateMirror
	MaxMirrorKey = KeySwitchRoute
)

// APIInfo describes one mirror RPC as advertised in ApiVersions.
type APIInfo struct {
	Key             int16
	Name            string
	MinVersion      int16
	MaxVersion      int16
	FlexibleVersion int16 // first flexible version; the mirror RPCs are flexible from v0

	newRequest  func() kmsg.Request
	newResponse func() kmsg.Response
}

// MirrorAPIs returns a copy of the mirror RPC table, in key order, for
// ApiVersions advertisement and dispatch.
func MirrorAPIs() []APIInfo {
	return append([]APIInfo(nil), mirrorAPIs...)
}

// IsMirrorKey reports whether k is one of the mirror RPCs the proxy answers
// itself instead of forwarding.
func IsMirrorKey(k int16) bool {
	_, ok := mirrorAPI(k)
	return ok
}

// MirrorKeyIndex returns k's position in the mirror table (0 for
// CreateMirror), or -1 when k is not a mirror key; callers keep per-key
// state in arrays of len(MirrorAPIs()).
func MirrorKeyIndex(k int16) int {
	if k < MinMirrorKey || k > MaxMirrorKey {
		return -1
	}
	return int(k - MinMirrorKey)
}

func mirrorAPI(k int16) (*APIInfo, bool) {
	if i := MirrorKeyIndex(k); i >= 0 {
		return &mirrorAPIs[i], true
	}
	return nil, false
}

// MirrorKeyRange is the advertised range as people read it, "1000–1011",
// for error messages and logs.
func MirrorKeyRange() string { return fmt.Sprintf("%d–%d", MinMirrorKey, MaxMirrorKey) }

// APIName returns the name of a mirror RPC, or kmsg's name for a standard
// Kafka key ("Unknown" if kmsg does not know it either).
func APIName(k int16) string {
	if api, ok := mirrorAPI(k); ok {
		return api.Name
	}
	return kmsg.NameForKey(k)
}

// RequestForKey returns a new, default-valued request for a mirror key, or
// nil for any other key (use kmsg.RequestForKey for standard keys).
func RequestForKey(key int16) kmsg.Request {
	if api, ok := mirrorAPI(key); ok {
		return api.newRequest()
	}
	return nil
}

// ResponseForKey is RequestForKey for responses.
func ResponseForKey(key int16) kmsg.Response {
	if api, ok := mirrorAPI(key); ok {
		return api.newResponse()
	}
	return nil
}

// checkVersion refuses to decode a version whose layout this package does
// not know, rather than guessing at it.
func checkVersion(k, version int16) error {
	api, _ := mirrorAPI(k)
	if version < api.MinVersion || version > api.MaxVersion {
		return fmt.Errorf("protocol: %s v%d is not supported (versions %d..%d)", api.Name, version, api.MinVersion, api.MaxVersion)
	}
	return nil
}
