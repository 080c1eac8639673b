package faultnet

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkHopResponses: what a Front's hop itself carries, with no Kafka on
// either side, asked the way the copier's Fetches ask: each of conns
// connections requests a 16 MiB answer and waits for all of it before asking
// again, for 5 s. It tells the hop's limit from the copier's in the WAN
// benchmark (bench/README.md, "WAN", 2026-12-07 17:30: 8 connections carried
// about 750 MB/s across 150 ms, twice what kmirror's copy reached through it).
func BenchmarkHopResponses(b *testing.B) {
	for _, rtt := range []int{0, 150} {
		for _, conns := range []int{1, 8} {
			b.Run(fmt.Sprintf("%dms/%dconns", rtt, conns), func(b *testing.B) {
				hopRun(b, rtt, conns, 16<<20)
			})
		}
	}
}

// hopRun measures conns connections through one Front with rtt ms of round trip.
func hopRun(b *testing.B, rtt, conns, size int) {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	payload := make([]byte, size)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var one [1]byte
				for {
					if _, err := io.ReadFull(c, one[:]); err != nil {
						return
					}
					if _, err := c.Write(payload); err != nil {
						return
					}
				}
			}()
		}
	}()
	f := newFront(b, "HOP", 1)
	f.connect(b, []string{ln.Addr().String()})
	if rtt > 0 {
		if err := f.Latency(rtt, 0); err != nil {
			b.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var total atomic.Int64
	deadline := time.Now().Add(5 * time.Second)
	start := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", f.Addrs()[0])
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close()
			buf := make([]byte, size)
			for time.Now().Before(deadline) {
				if _, err := c.Write([]byte{1}); err != nil {
					b.Error(err)
					return
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Error(err)
					return
				}
				total.Add(int64(size))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.ReportMetric(float64(total.Load())/el.Seconds()/1e6, "MB/s")
}
