package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/kmirror/kmirror/protocol"
)

// This file holds the few framing and header primitives the proxy needs on its hot path.
// Header versions and layouts are protocol's (header.go); what differs on purpose is the
// framing: frames keep their size prefix (forwarding writes them unchanged, without
// re-prepending or copying) and come from the frame pool.

var errFrameTooLarge = errors.New("frame exceeds the maximum frame size")

// readFrame reads one size-prefixed Kafka frame and returns it including its 4-byte size
// prefix, so that forwarding never has to re-prepend the length.
func readFrame(r io.Reader, maxFrame int32) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || n > maxFrame {
		return nil, fmt.Errorf("%w: size %d, limit %d", errFrameTooLarge, n, maxFrame)
	}
	frame := getFrame(4 + int(n))
	copy(frame, size[:])
	if _, err := io.ReadFull(r, frame[4:]); err != nil {
		putFrame(frame)
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("reading %d-byte frame body: %w", n, err)
	}
	return frame, nil
}

// requestHeader is the part of a request header the proxy looks at, in the
// short names its hot path uses; the parse itself is protocol's.
type requestHeader struct {
	key      int16
	version  int16
	corrID   int32
	flexible bool // header v2: tagged fields follow the client id
	bodyOff  int  // offset of the request body within the payload (frame[4:])
}

// parseRequestHeader parses the header of payload (a frame without its size prefix) with
// protocol.PeekRequestHeader, which skips the client id instead of allocating it. For a key
// protocol does not know, flexible is false and the caller decides what to do with the
// request. On an error the key and version are still set if the payload has them.
func parseRequestHeader(payload []byte) (requestHeader, error) {
	h, err := protocol.PeekRequestHeader(payload)
	return requestHeader{key: h.APIKey, version: h.APIVersion, corrID: h.CorrelationID,
		flexible: h.Flexible, bodyOff: h.Len}, err
}

// requestIsFlexible reports whether a request uses flexible versions (header v2).
func requestIsFlexible(key, version int16) bool {
	flexible, _ := protocol.IsFlexibleRequest(key, version)
	return flexible
}

// responseHeaderVersion is 1 (with tagged fields) for flexible responses, except
// ApiVersions, whose response header stays v0 so that any client can parse it (KIP-511).
func responseHeaderVersion(key, version int16) int16 {
	return protocol.ResponseHeaderVersion(key, version)
}

// appendResponseFrame builds a complete response frame: size, then protocol's response
// header of version hdrVersion, then body.
func appendResponseFrame(dst []byte, corrID int32, hdrVersion int16, body []byte) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0) // the size, known at the end
	dst = protocol.AppendResponseHeader(dst, corrID, hdrVersion)
	dst = append(dst, body...)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// splitResponse returns the correlation id and body of a response frame (with size prefix).
func splitResponse(frame []byte, hdrVersion int16) (int32, []byte, error) {
	if len(frame) < 4 {
		return 0, nil, errors.New("truncated response header")
	}
	return protocol.ParseResponseHeader(frame[4:], hdrVersion)
}
