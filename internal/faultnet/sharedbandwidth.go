package faultnet

import (
	"sync"
	"time"

	"github.com/Shopify/toxiproxy/v2/toxics"
)

// SharedBandwidthToxic caps every connection of a proxy together, as a WAN link
// of that bandwidth would: Toxiproxy's own bandwidth toxic paces each connection
// on its own, so a copier that fetches over four connections got four times "the
// cap" (bench/README.md, WAN). Toxiproxy keeps one toxic object per proxy and
// stream and pipes every connection through it, so the schedule below is shared;
// each chunk leaves once the link has sent everything before it.
type SharedBandwidthToxic struct {
	// Rate in KB/s of 1000 bytes (bytes per millisecond), as the bandwidth toxic's.
	Rate int64 `json:"rate"`

	mu   sync.Mutex
	free time.Time // when the link has sent every chunk scheduled so far
}

// sharedBandwidth is the toxic's type name in Toxic.Type.
const sharedBandwidth = "shared_bandwidth"

func init() { toxics.Register(sharedBandwidth, new(SharedBandwidthToxic)) }

// Pipe passes each chunk on at the end of its turn on the shared link.
func (t *SharedBandwidthToxic) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			select {
			case <-time.After(t.schedule(len(c.Data))):
				stub.Output <- c
			case <-stub.Interrupt:
				_ = stub.WriteOutput(c, 5*time.Second) // drop no data on the floor
				return
			}
		}
	}
}

// schedule books n bytes on the link and returns how long until they are sent.
func (t *SharedBandwidthToxic) schedule(n int) time.Duration {
	if t.Rate <= 0 {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if t.free.Before(now) {
		t.free = now
	}
	t.free = t.free.Add(time.Duration(n) * time.Millisecond / time.Duration(t.Rate))
	return t.free.Sub(now)
}
