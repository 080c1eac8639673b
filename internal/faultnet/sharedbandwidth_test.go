package faultnet

import (
	"sync"
	"testing"
	"time"
)

// Chunks of several connections share one schedule: 2 connections × 100 chunks
// of 1,000 bytes at 1,000 KB/s take 200 ms of link time together, not 100 ms
// each side by side as with Toxiproxy's per-connection bandwidth toxic.
func TestSharedBandwidthSchedulesEveryConnectionOnOneLink(t *testing.T) {
	tx := &SharedBandwidthToxic{Rate: 1000}
	began := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last time.Time
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				at := time.Now().Add(tx.schedule(1000))
				mu.Lock()
				if at.After(last) {
					last = at
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if got := last.Sub(began); got < 200*time.Millisecond {
		t.Fatalf("200,000 bytes at 1,000 KB/s scheduled to be sent within %v: the connections are not sharing the link", got)
	}
	if (&SharedBandwidthToxic{}).schedule(1<<20) != 0 {
		t.Fatal("a rate of 0 must not delay")
	}
}
