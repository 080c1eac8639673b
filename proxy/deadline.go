package proxy

import (
	"net"
	"time"
)

// Writes to a client that stops reading fail within writeTimeout (a stuck client must not pin
// its session forever), and within at least writeTimeout-deadlineSlack of the write's start:
// the deadline is moved only when less than that remains, not on every response, because
// each move re-arms a runtime timer and small responses paid for one on every write.
const (
	writeTimeout  = time.Minute
	deadlineSlack = 10 * time.Second
)

// writeDeadline is a connection's write deadline, as unix nanoseconds; its user serialises
// calls to arm.
type writeDeadline struct{ at int64 }

func (d *writeDeadline) arm(c net.Conn) {
	now := time.Now()
	if d.at-now.UnixNano() >= int64(writeTimeout-deadlineSlack) {
		return
	}
	at := now.Add(writeTimeout)
	d.at = at.UnixNano()
	_ = c.SetWriteDeadline(at)
}
