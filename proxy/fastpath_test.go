package proxy

import (
	"io"
	"net"
	"testing"
)

// TestTryWriteDoesNotAllocate: the fast path's non-blocking write runs for every small
// request; a closure made per call for RawConn.Write was an allocation per request. It also
// checks that the bytes arrive.
func TestTryWriteDoesNotAllocate(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := c.(*net.TCPConn)
	rc, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	u := newUpstreamRaw(rc, tc)
	msg := []byte("0123456789")
	const runs = 200
	allocs := testing.AllocsPerRun(runs, func() {
		if n, err := u.tryWrite(msg); err != nil || n != len(msg) {
			t.Errorf("tryWrite: %d bytes, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per tryWrite, want 0", allocs)
	}
	_ = c.Close()
	b := <-got
	if want := (runs + 1) * len(msg); len(b) != want { // AllocsPerRun runs once more to warm up
		t.Fatalf("the peer read %d bytes, want %d", len(b), want)
	}
	for i := 0; i < len(b); i += len(msg) {
		if string(b[i:i+len(msg)]) != string(msg) {
			t.Fatalf("bytes at %d: %q", i, b[i:i+len(msg)])
		}
	}
}
