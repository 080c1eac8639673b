package proxy

import (
	"net"
	"testing"
	"time"
)

type deadlineConn struct {
	net.Conn
	set []time.Time
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.set = append(c.set, t)
	return nil
}

// The deadline is set on the first write and moved only once less than the slack is left of
// its lead, so a write always has at least writeTimeout-deadlineSlack to finish.
func TestWriteDeadline(t *testing.T) {
	var c deadlineConn
	var d writeDeadline
	for range 100 {
		d.arm(&c)
	}
	if len(c.set) != 1 || time.Until(c.set[0]) < writeTimeout-time.Second {
		t.Fatalf("100 writes set the deadline %d times (%v), want once, a write timeout ahead", len(c.set), c.set)
	}
	d.at -= int64(deadlineSlack + time.Second) // as if deadlineSlack had passed
	d.arm(&c)
	if len(c.set) != 2 || time.Until(c.set[1]) < writeTimeout-time.Second {
		t.Fatalf("with less than the slack left the deadline was not moved a write timeout ahead: %v", c.set)
	}
}
