package proxy

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// The fast path saves small requests a goroutine hand-off. When nothing is queued for the
// upstream writer goroutine, the client side (event loop or TLS reader) tries one
// non-blocking write of the request itself; whatever the socket does not take goes to the
// writer as usual. It never blocks the event loop: the write is a single non-blocking
// syscall. Order holds because the fast path runs only while queued is zero, i.e. when every
// earlier request is already in the socket, and the writer goroutine counts an entry as
// queued until its bytes are written. Plain TCP upstreams only (TLS needs its record layer).

type upstreamRaw struct {
	rc syscall.RawConn
	tc *net.TCPConn // for blocking writes and splices from a handed-off connection (bulk.go)

	// One non-blocking write's arguments and results, and the function rc runs for it, bound
	// once: a closure made per call would be an allocation per request. Callers hold upMu.
	buf   []byte
	n     int
	err   error
	write func(fd uintptr) bool
}

func newUpstreamRaw(rc syscall.RawConn, tc *net.TCPConn) *upstreamRaw {
	u := &upstreamRaw{rc: rc, tc: tc}
	u.write = u.writeFD
	return u
}

func (u *upstreamRaw) writeFD(fd uintptr) bool {
	u.n, u.err = unix.Write(int(fd), u.buf)
	return true // never wait for writability
}

// tryWrite writes what the socket takes now, without waiting. The caller holds upMu.
func (u *upstreamRaw) tryWrite(b []byte) (int, error) {
	u.buf, u.n, u.err = b, 0, nil
	werr := u.rc.Write(u.write)
	n, err := u.n, u.err
	u.buf, u.err = nil, nil
	if werr != nil {
		return 0, werr
	}
	if n < 0 {
		n = 0
	}
	if err == unix.EAGAIN || err == unix.EINTR {
		err = nil
	}
	return n, err
}

// forward sends ob upstream, directly when possible, else through the writer goroutine.
func (s *session) forward(ob outbound) {
	if s.queued.Load() == 0 {
		if raw := s.upRaw.Load(); raw != nil && s.upMu.TryLock() {
			n, err := raw.tryWrite(ob.frame[ob.off:])
			s.upMu.Unlock()
			if err == nil {
				ob.off += n
				if ob.off == len(ob.frame) {
					putFrame(ob.frame)
					if ob.noResponse {
						s.release()
					}
					return
				}
			}
			// A failed write is left to the writer goroutine, which reports it and closes.
		}
	}
	s.queued.Add(1)
	s.toUpstream <- ob
}
