// Package protocol is kmirror's Kafka wire layer: everything between the bytes
// on a socket and a typed request or response, and nothing above it.
//
// It has four parts, each usable on its own:
//
//   - Frames (frame.go): the 4-byte size prefix Kafka puts around every
//     request and response, for blocking readers (ReadFrame) and for event-loop
//     codecs that see partial buffers (FrameSize).
//   - Headers (header.go): request header v1/v2 and response header v0/v1, so
//     the proxy can route, answer or forward a frame without decoding its body.
//     Which header version a request uses depends on its key and version;
//     IsFlexibleRequest answers that for every key kmsg knows plus the mirror keys.
//   - Mirror RPCs (generated.go, generated from definitions/*.def by
//     internal/gen; see docs/proxy.md, "Generated messages"): the Cluster
//     Mirroring requests and responses kmirror serves itself. They implement
//     franz-go's kmsg.Request and kmsg.Response, so a kgo.Client can send them
//     to any listener that advertises the keys in ApiVersions. API keys and
//     versions live in one table (apikeys.go); error codes in another (errors.go).
//   - Partition states (state.go): the MirrorState enum shared by the wire,
//     the state topic and the CLI.
//
// The message types follow kmsg's conventions: NewPtrX returns a new
// message, element types whose fields default to something other than zero
// (-1 for "unknown" offsets, UNKNOWN states) have Default and NewX, non-
// nullable arrays decode empty as nil, and UnknownTags keeps tagged fields
// this version does not know so they survive a decode/encode round trip.
// A kgo.Client needs kgo.MaxVersions(KgoMaxVersions(nil)) to send them;
// ProbeMirrorAPIs tells a kmirror that serves them at this build's keys
// from anything else before the first one is sent.
//
// Decoding treats every peer as hostile: malformed input yields an error
// wrapping ErrMalformedFrame or ErrMalformedMessage, never a panic, and no
// allocation is sized by a length the input cannot back with bytes.
package protocol

//go:generate go run ./internal/gen -defs definitions -out generated.go
//go:generate go run ./internal/gen -defs testdata/describe_v0 -out describe_v0_generated_test.go
