package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/kmirror/kmirror/protocol"
)

// This file holds the few framing and header primitives the proxy needs on its hot path.
// They differ from protocol.ReadFrame/ParseRequestHeader on purpose: frames keep their size
// prefix (forwarding writes them unchanged, without re-prepending or copying) and the header
// parse skips the client id string instead of allocating it.

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

// requestHeader is the part of a request header the proxy looks at.
type requestHeader struct {
	key      int16
	version  int16
	corrID   int32
	flexible bool // header v2: tagged fields follow the client id
	bodyOff  int  // offset of the request body within the payload (frame[4:])
}

var errShortHeader = errors.New("truncated request header")

// parseRequestHeader parses the header of payload (a frame without its size prefix).
// flexibleRequest reports whether (key, version) uses header v2; for a key the proxy does
// not know it must return false and the caller decides what to do with the request.
func parseRequestHeader(payload []byte) (requestHeader, error) {
	var h requestHeader
	if len(payload) < 10 {
		return h, errShortHeader
	}
	h.key = int16(binary.BigEndian.Uint16(payload[0:]))
	h.version = int16(binary.BigEndian.Uint16(payload[2:]))
	h.corrID = int32(binary.BigEndian.Uint32(payload[4:]))
	// The client id is a classic nullable string in every header version (KIP-482 kept it).
	idLen := int(int16(binary.BigEndian.Uint16(payload[8:])))
	off := 10
	if idLen > 0 {
		off += idLen
	}
	if off > len(payload) {
		return h, errShortHeader
	}
	h.flexible = requestIsFlexible(h.key, h.version)
	if h.flexible {
		n, err := skipTags(payload[off:])
		if err != nil {
			return h, fmt.Errorf("request header tagged fields: %w", err)
		}
		off += n
	}
	h.bodyOff = off
	return h, nil
}

// requestIsFlexible reports whether a request uses flexible versions (header v2).
func requestIsFlexible(key, version int16) bool {
	flexible, _ := protocol.IsFlexibleRequest(key, version)
	return flexible
}

// responseHeaderVersion is 1 (with tagged fields) for flexible responses, except
// ApiVersions, whose response header stays v0 so that any client can parse it (KIP-511).
func responseHeaderVersion(key, version int16) int16 {
	if key == 18 {
		return 0
	}
	if requestIsFlexible(key, version) {
		return 1
	}
	return 0
}

// appendResponseFrame builds a complete response frame: size, correlation id, header tags
// (header v1) and body.
func appendResponseFrame(dst []byte, corrID int32, hdrVersion int16, body []byte) []byte {
	n := 4 + len(body)
	if hdrVersion >= 1 {
		n++
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst = binary.BigEndian.AppendUint32(dst, uint32(corrID))
	if hdrVersion >= 1 {
		dst = append(dst, 0) // no header tagged fields
	}
	return append(dst, body...)
}

// splitResponse returns the correlation id and body of a response frame (with size prefix).
func splitResponse(frame []byte, hdrVersion int16) (int32, []byte, error) {
	if len(frame) < 8 {
		return 0, nil, errors.New("truncated response header")
	}
	corrID := int32(binary.BigEndian.Uint32(frame[4:]))
	body := frame[8:]
	if hdrVersion >= 1 {
		n, err := skipTags(body)
		if err != nil {
			return 0, nil, fmt.Errorf("response header tagged fields: %w", err)
		}
		body = body[n:]
	}
	return corrID, body, nil
}

// skipTags returns the encoded length of a tagged-field section at the start of b.
func skipTags(b []byte) (int, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, errShortHeader
	}
	off := n
	for i := uint64(0); i < count; i++ {
		_, n = binary.Uvarint(b[off:])
		if n <= 0 {
			return 0, errShortHeader
		}
		off += n
		size, n := binary.Uvarint(b[off:])
		if n <= 0 || uint64(len(b)-off-n) < size {
			return 0, errShortHeader
		}
		off += n + int(size)
	}
	return off, nil
}
