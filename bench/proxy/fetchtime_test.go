package proxybench

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchTimer times the consumer's Fetch round trips on the wire: from the write of a Fetch
// request to the first response byte read (the request's way to the broker, the broker's work,
// the first bytes' way back), and to the end of the response (the rest is the transfer). It
// tells whether a path loses consume throughput in latency per request or in transfer rate.
// Only responses of fetchTimedBytes or more count: they carry records, so the broker did not
// wait for data to arrive (a long poll) before answering.
type fetchTimer struct {
	mu        sync.Mutex
	wrote     time.Time // the Fetch request in flight was written
	firstRead time.Time // zero until its response's first byte is read
	n         int
	first     time.Duration // sums over the counted responses
	total     time.Duration
}

const fetchTimedBytes = 64 << 10

// dial connects as kgo would and watches the connection's writes and reads. franz-go writes
// each request in one Write and keeps Fetch on a connection of its own, so a write whose
// header names key 1 starts a Fetch round trip.
func (ft *fetchTimer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return &timedConn{Conn: c, ft: ft}, nil
}

// OnBrokerRead (kgo.HookBrokerRead) ends a Fetch round trip.
func (ft *fetchTimer) OnBrokerRead(_ kgo.BrokerMetadata, key int16, bytesRead int, _, _ time.Duration, _ error) {
	if key != 1 {
		return
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if bytesRead >= fetchTimedBytes && !ft.wrote.IsZero() && !ft.firstRead.IsZero() {
		ft.n++
		ft.first += ft.firstRead.Sub(ft.wrote)
		ft.total += time.Since(ft.wrote)
	}
	ft.wrote = time.Time{}
}

// means returns the mean time to the first byte and to the end of the counted responses.
func (ft *fetchTimer) means() (first, total time.Duration) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if ft.n == 0 {
		return 0, 0
	}
	return ft.first / time.Duration(ft.n), ft.total / time.Duration(ft.n)
}

type timedConn struct {
	net.Conn
	ft *fetchTimer
}

func (c *timedConn) Write(b []byte) (int, error) {
	if len(b) >= 6 && binary.BigEndian.Uint16(b[4:6]) == 1 {
		c.ft.mu.Lock()
		c.ft.wrote, c.ft.firstRead = time.Now(), time.Time{}
		c.ft.mu.Unlock()
	}
	return c.Conn.Write(b)
}

func (c *timedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.ft.mu.Lock()
		if !c.ft.wrote.IsZero() && c.ft.firstRead.IsZero() {
			c.ft.firstRead = time.Now()
		}
		c.ft.mu.Unlock()
	}
	return n, err
}
