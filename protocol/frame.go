package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// ErrFrameTooLarge is returned (wrapped) when a frame's size prefix exceeds the
// configured maximum. The connection cannot be resynchronised afterwards.
var ErrFrameTooLarge = errors.New("protocol: frame larger than the configured maximum")

// ErrMalformedFrame is returned (wrapped) when a frame or its header cannot be
// parsed, e.g. a negative size prefix or a header cut short.
var ErrMalformedFrame = errors.New("protocol: malformed frame")

// frameEagerAlloc is how much of a frame ReadFrame allocates before any of its
// payload has arrived. Larger frames grow as bytes actually arrive, so a peer
// that announces a maximum-size frame and then stalls costs us at most this
// much, not the configured maximum (invariant 7: memory bounded by config,
// not by what peers claim).
const frameEagerAlloc = 1 << 20

// ReadFrame reads one 4-byte-big-endian-size-prefixed frame from r and
// returns the payload without the prefix.
//
// A negative size wraps ErrMalformedFrame, a size above max wraps
// ErrFrameTooLarge; both are reported before anything is allocated. The
// payload buffer never exceeds max bytes. A clean end of stream before the
// first prefix byte returns io.EOF unwrapped so callers can tell a closed
// connection from a truncated frame (io.ErrUnexpectedEOF, wrapped).
func ReadFrame(r io.Reader, max int32) ([]byte, error) {
	var prefix [4]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("protocol: reading frame size: %w", err)
	}
	size, err := checkFrameSize(prefix[:], max)
	if err != nil {
		return nil, err
	}
	if size <= frameEagerAlloc {
		payload := make([]byte, size)
		if _, err := io.ReadFull(r, payload); err != nil {
			return nil, fmt.Errorf("protocol: reading %d-byte frame: %w", size, truncatedErr(err))
		}
		return payload, nil
	}
	return readLargeFrame(r, size)
}

// readLargeFrame reads size bytes, doubling the buffer only as data arrives.
func readLargeFrame(r io.Reader, size int) ([]byte, error) {
	payload := make([]byte, 0, frameEagerAlloc)
	for len(payload) < size {
		if len(payload) == cap(payload) {
			grown := make([]byte, len(payload), min(2*cap(payload), size))
			copy(grown, payload)
			payload = grown
		}
		n, err := io.ReadFull(r, payload[len(payload):cap(payload)])
		payload = payload[:len(payload)+n]
		if err != nil {
			return nil, fmt.Errorf("protocol: reading %d-byte frame after %d bytes: %w", size, len(payload), truncatedErr(err))
		}
	}
	return payload, nil
}

func truncatedErr(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// FrameSize inspects buf, which may hold a partial frame, and returns the
// total length of the first frame (prefix plus payload) once all of it is in
// buf, or 0 if more bytes are needed. An invalid or oversized prefix is an
// error as soon as the 4 prefix bytes are present, so an event loop can drop
// the connection without buffering the payload.
func FrameSize(buf []byte, max int32) (int, error) {
	if len(buf) < 4 {
		return 0, nil
	}
	size, err := checkFrameSize(buf[:4], max)
	if err != nil {
		return 0, err
	}
	if len(buf)-4 < size {
		return 0, nil
	}
	return 4 + size, nil
}

func checkFrameSize(prefix []byte, max int32) (int, error) {
	size := int32(binary.BigEndian.Uint32(prefix))
	switch {
	case size < 0:
		return 0, fmt.Errorf("%w: negative size prefix %d", ErrMalformedFrame, size)
	case size > max:
		return 0, fmt.Errorf("%w: %d bytes, maximum is %d", ErrFrameTooLarge, size, max)
	case int64(size) > math.MaxInt-4: // only reachable where int is 32 bits
		return 0, fmt.Errorf("%w: %d bytes does not fit this platform", ErrFrameTooLarge, size)
	}
	return int(size), nil
}

// AppendFrame appends the 4-byte size prefix and payload to dst. Payloads
// over math.MaxInt32 bytes cannot be framed; callers bound them long before.
func AppendFrame(dst, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}
