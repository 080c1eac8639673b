// Package freeport picks loopback ports for the processes tests start (Kafka brokers,
// kmirror processes, Prometheus), which bind them a moment later. The picks come from below
// the kernel's ephemeral port range: a port picked from it (by listening on :0) can be given
// to any outgoing connection before the process binds it, and with many clients running in
// parallel tests one was (TestRouteSwitchDriverKilledAtEachStep: "bind: address already in
// use" for a route's listener). Below the range, only another explicit pick can take it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is where picks start: below it are the well-known and registered ports services
// of the machine may use.
const lowest = 10000

// Addrs returns n distinct free loopback addresses (127.0.0.1:port).
func Addrs(n int) ([]string, error) {
	ports, err := Ports(n)
	if err != nil {
		return nil, err
	}
	out := make([]string, n)
	for i, p := range ports {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return out, nil
}

// Addr returns one free loopback address.
func Addr() (string, error) {
	a, err := Addrs(1)
	if err != nil {
		return "", err
	}
	return a[0], nil
}

// Ports returns n distinct ports free on 127.0.0.1, each held until all are found.
func Ports(n int) ([]int, error) {
	top := ephemeralStart()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("freeport: no %d free ports in %d..%d", n, lowest, top-1)
		}
		p := lowest + rand.IntN(top-lowest)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	return ports, nil
}

// ephemeralStart is the first port of the kernel's ephemeral range (Linux's default when it
// cannot be read).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo > lowest+1000 {
				return lo
			}
		}
	}
	return 32768
}
