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
}

// tryWrite writes what the socket takes now, without waiting.
func (u *upstreamRaw) tryWrite(b []byte) (int, error) {
	var n int
	var err error
	if werr := u.rc.Write(func(fd uintptr) bool {
		n, err = unix.Write(int(fd), b)
		return true // never wait for writability
	}); werr != nil {
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
