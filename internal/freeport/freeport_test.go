package freeport

import (
	"net"
	"strconv"
	"testing"
)

// Picks are distinct, bindable, and below the ephemeral range.
func TestPortsAreFreeAndNotEphemeral(t *testing.T) {
	ports, err := Ports(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	top := ephemeralStart()
	for _, p := range ports {
		if seen[p] || p < lowest || p >= top {
			t.Fatalf("port %d: repeated or outside %d..%d", p, lowest, top-1)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d was picked but cannot be bound: %v", p, err)
		}
		l.Close()
	}
}
