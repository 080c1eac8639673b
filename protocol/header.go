package protocol

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka keys whose header handling is special.
const (
	keyControlledShutdown int16 = 7  // v0 uses request header v0: no client id
	keyAPIVersions        int16 = 18 // responses always use header v0 (KIP-511)
)

// RequestHeader is the part of a request frame before its body.
type RequestHeader struct {
	APIKey        int16
	APIVersion    int16
	CorrelationID int32
	ClientID      *string // nil when the client sent a null client id
	Flexible      bool    // header v2: a tagged-field section follows the client id
	Len           int     // bytes of header within the frame payload; body = payload[Len:]
}

// ParseRequestHeader parses the request header at the start of a frame
// payload and returns it with the body, a sub-slice of payload (no copy).
//
// The header version follows from the key and version (IsFlexibleRequest).
// For keys it does not know it parses the v1 fields only and reports
// Flexible=false: the body may then start with header tags, but the caller
// can still answer UNSUPPORTED_VERSION or forward by correlation id. Header
// tagged fields are validated and skipped; none are defined today.
//
// A client id with any negative length is null, as the Java broker reads it,
// so the proxy refuses nothing the broker would accept.
func ParseRequestHeader(payload []byte) (RequestHeader, []byte, error) {
	h, err := parseRequestHeader(payload, true)
	if err != nil {
		return RequestHeader{}, nil, err
	}
	return h, payload[h.Len:], nil
}

// PeekRequestHeader is ParseRequestHeader for a hot path: it skips the
// client id instead of allocating it (ClientID stays nil) and returns no
// body (it is payload[h.Len:]). On an error, h still holds the key, version
// and correlation id if the payload has them, for the caller's logs and
// metrics.
func PeekRequestHeader(payload []byte) (h RequestHeader, err error) {
	return parseRequestHeader(payload, false)
}

func parseRequestHeader(payload []byte, keepClientID bool) (RequestHeader, error) {
	if len(payload) < 8 {
		return RequestHeader{}, fmt.Errorf("%w: request header needs 8 bytes, frame has %d", ErrMalformedFrame, len(payload))
	}
	h := RequestHeader{
		APIKey:        int16(binary.BigEndian.Uint16(payload)),
		APIVersion:    int16(binary.BigEndian.Uint16(payload[2:])),
		CorrelationID: int32(binary.BigEndian.Uint32(payload[4:])),
	}
	if hasNoClientID(h.APIKey, h.APIVersion) {
		h.Len = 8
		return h, nil
	}
	b := kbin.Reader{Src: payload[8:]}
	if l := b.Int16(); l >= 0 {
		id := b.Span(int(l))
		if keepClientID && b.Ok() {
			s := string(id)
			h.ClientID = &s
		}
	}
	if !b.Ok() {
		return h, fmt.Errorf("%w: client id of %s v%d request (correlation id %d) runs past the frame",
			ErrMalformedFrame, APIName(h.APIKey), h.APIVersion, h.CorrelationID)
	}
	h.Flexible, _ = IsFlexibleRequest(h.APIKey, h.APIVersion)
	if h.Flexible {
		if err := skipTags(&b); err != nil {
			return h, fmt.Errorf("%w: tagged fields of %s v%d request header (correlation id %d): %w",
				ErrMalformedFrame, APIName(h.APIKey), h.APIVersion, h.CorrelationID, err)
		}
	}
	h.Len = len(payload) - len(b.Src)
	return h, nil
}

// AppendRequestHeader appends h to dst as header v1, or v2 if h.Flexible.
// h.Len is ignored. ControlledShutdown v0 gets header v0, as it must.
func AppendRequestHeader(dst []byte, h RequestHeader) []byte {
	dst = kbin.AppendInt16(dst, h.APIKey)
	dst = kbin.AppendInt16(dst, h.APIVersion)
	dst = kbin.AppendInt32(dst, h.CorrelationID)
	if hasNoClientID(h.APIKey, h.APIVersion) {
		return dst
	}
	// The client id stays a non-compact string even in header v2, so that
	// a broker can read it before it knows whether the request is flexible.
	dst = kbin.AppendNullableString(dst, h.ClientID)
	if h.Flexible {
		dst = append(dst, 0) // no header tags
	}
	return dst
}

func hasNoClientID(key, version int16) bool {
	return key == keyControlledShutdown && version == 0
}

// IsFlexibleRequest reports whether key@version uses request header v2.
// known is false for keys neither kmsg nor the mirror table knows; flexible
// is then false. Mirror keys are looked up first: should Kafka ever reach
// kmirror's range, the mirror layout is the one this package decodes (the
// proxy then stops serving the colliding key, see apikeys.go).
//
// Versions above the newest one kmsg knows are treated as flexible when the
// key is flexible at all: Kafka never makes a flexible API inflexible again.
func IsFlexibleRequest(key, version int16) (flexible, known bool) {
	if api, ok := mirrorAPI(key); ok {
		return version >= api.FlexibleVersion, true
	}
	table := kmsgFirstFlexible()
	if key < 0 || int(key) >= len(table) {
		return false, false
	}
	first := table[key]
	if first == unknownKey {
		return false, false
	}
	return first >= 0 && version >= first, true
}

// kmsgFirstFlexible holds, for each key below 1024, its first flexible version: -1 if it has
// none, unknownKey if kmsg does not know the key. It is built once, and an array rather than a
// map, because IsFlexibleRequest runs for every proxied request.
var kmsgFirstFlexible = sync.OnceValue(func() *[1024]int16 {
	var first [1024]int16
	for key := range int16(len(first)) {
		first[key] = unknownKey
		req := kmsg.RequestForKey(key)
		if req == nil {
			continue
		}
		first[key] = -1
		for v := int16(0); v <= req.MaxVersion(); v++ {
			req.SetVersion(v)
			if req.IsFlexible() {
				first[key] = v
				break
			}
		}
	}
	return &first
})

// unknownKey marks a key kmsg does not know in kmsgFirstFlexible.
const unknownKey = -2

// ResponseHeaderVersion returns the response header version for a request
// of key@version: 1 if the request was flexible, else 0. ApiVersions
// responses always use v0 so that a client that sent a version the broker
// does not know can still read the error.
func ResponseHeaderVersion(key, version int16) int16 {
	if key == keyAPIVersions {
		return 0
	}
	if flexible, _ := IsFlexibleRequest(key, version); flexible {
		return 1
	}
	return 0
}

// AppendResponseHeader appends a response header of the given version (0 or
// 1) to dst.
func AppendResponseHeader(dst []byte, correlationID int32, headerVersion int16) []byte {
	dst = kbin.AppendInt32(dst, correlationID)
	if headerVersion >= 1 {
		dst = append(dst, 0) // no header tags
	}
	return dst
}

// ParseResponseHeader parses a response header of the given version (0 or 1)
// and returns the correlation id and the body, a sub-slice of payload.
func ParseResponseHeader(payload []byte, headerVersion int16) (correlationID int32, body []byte, err error) {
	if headerVersion != 0 && headerVersion != 1 {
		return 0, nil, fmt.Errorf("protocol: response header version %d does not exist", headerVersion)
	}
	if len(payload) < 4 {
		return 0, nil, fmt.Errorf("%w: response header needs 4 bytes, frame has %d", ErrMalformedFrame, len(payload))
	}
	correlationID = int32(binary.BigEndian.Uint32(payload))
	b := kbin.Reader{Src: payload[4:]}
	if headerVersion == 1 {
		if err := skipTags(&b); err != nil {
			return 0, nil, fmt.Errorf("%w: tagged fields of response header (correlation id %d): %w", ErrMalformedFrame, correlationID, err)
		}
	}
	return correlationID, b.Src, nil
}

// skipTags validates and skips a tagged-field section.
func skipTags(b *kbin.Reader) error {
	n := b.Uvarint()
	for i := uint32(0); i < n && b.Ok(); i++ {
		b.Uvarint() // tag
		b.Span(int(b.Uvarint()))
	}
	if !b.Ok() {
		return errEndsEarly
	}
	return nil
}
