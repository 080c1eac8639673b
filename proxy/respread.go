package proxy

import (
	"io"
	"net"
)

// respReader reads responses from the upstream socket through a small buffer: one read
// takes a response's header and body together, and often the next responses too when the
// client pipelines (two reads per response before: header, then body). Large responses are
// still relayed socket to socket: what the buffer already holds of one goes first, the rest
// is spliced (session.relayResponse).
type respReader struct {
	conn net.Conn
	buf  []byte
	r, w int // buf[r:w] is read and not yet consumed
}

// respBufferBytes covers the responses that come in numbers (Produce, small Fetch,
// heartbeats, offset commits) and is small enough to give every connection one.
const respBufferBytes = 16 << 10

func newRespReader(conn net.Conn) *respReader {
	return &respReader{conn: conn, buf: make([]byte, respBufferBytes)}
}

// buffered returns the bytes read and not yet consumed.
func (rr *respReader) buffered() int { return rr.w - rr.r }

// Read implements io.Reader: buffered bytes first; an empty buffer is refilled unless p is at
// least as large as it, which is read into directly.
func (rr *respReader) Read(p []byte) (int, error) {
	if rr.r == rr.w {
		if len(p) >= len(rr.buf) {
			return rr.conn.Read(p)
		}
		if err := rr.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, rr.buf[rr.r:rr.w])
	rr.r += n
	return n, nil
}

// fill reads what the socket has into an empty buffer, waiting until it has something.
func (rr *respReader) fill() error {
	if rr.r < rr.w {
		return nil
	}
	rr.r, rr.w = 0, 0
	n, err := rr.conn.Read(rr.buf)
	rr.w = n
	if n > 0 {
		return nil
	}
	return err
}

// take returns up to n buffered bytes and consumes them; they stay valid until the next Read.
func (rr *respReader) take(n int) []byte {
	n = min(n, rr.buffered())
	b := rr.buf[rr.r : rr.r+n]
	rr.r += n
	return b
}

var _ io.Reader = (*respReader)(nil)
