package faultnet

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/leaktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leaktest.Toxiproxy()...) }

// A client that bootstraps through the Front is told the proxies' addresses
// (so every connection passes a proxy), and a latency toxic slows each of its
// requests by the round trip it was given, which disappears with Reset.
func TestFrontAdvertisesProxiesAndDelays(t *testing.T) {
	front := New(t, "FAULT", 2)
	c := kafkatest.Start(t, kafkatest.Real(), kafkatest.Brokers(2), front.Listener())
	front.Connect(t, c)

	cl := kafkatest.NewClient(t, front.Addrs(), kgo.MetadataMinAge(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	md := metadata(ctx, t, cl)
	want := map[string]bool{}
	for _, a := range front.Addrs() {
		want[a] = true
	}
	for _, b := range md.Brokers {
		if addr := fmt.Sprintf("%s:%d", b.Host, b.Port); !want[addr] {
			t.Fatalf("broker %d advertised at %s, not at a proxy (%v)", b.NodeID, addr, front.Addrs())
		}
	}

	const rtt = 400 * time.Millisecond
	if err := front.Latency(int(rtt/time.Millisecond), 0); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	metadata(ctx, t, cl)
	if took := time.Since(began); took < rtt {
		t.Fatalf("a request through a %s round trip took %s", rtt, took)
	}
	front.Reset()
	began = time.Now()
	metadata(ctx, t, cl)
	if took := time.Since(began); took >= rtt {
		t.Fatalf("a request after Reset still took %s (round trip was %s)", took, rtt)
	}
}

func metadata(ctx context.Context, t *testing.T, cl *kgo.Client) *kmsg.MetadataResponse {
	t.Helper()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	return resp
}

// Toxiproxy 2.5.0 wedges removing a toxic from a link whose destination is
// gone while data still flows (Shopify/toxiproxy#412, #558): the toxic is
// blocked handing a chunk to a writer that has exited, cannot be
// interrupted, and RemoveToxic waits for it forever while holding the
// proxy's toxic lock, so every later Add, Remove and new connection of that
// proxy hangs too (it stopped the first 1,000-fault soak at fault 66). The
// Front bounds the removal and replaces a wedged proxy: Remove returns, the
// toxics still meant to be there are back, and new connections flow.
func TestRemoveFromWedgedLinkRecovers(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	var served sync.WaitGroup
	defer served.Wait()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			served.Add(1)
			go func() { // a broker that keeps sending until the peer is gone
				defer served.Done()
				defer c.Close()
				chunk := make([]byte, 32<<10)
				for {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()

	front := newFront(t, "WEDGE", 1)
	front.connect(t, []string{up.Addr().String()})
	front.removeTimeout = 2 * time.Second
	if err := front.Add(0, Toxic{Name: "kept", Type: "bandwidth", Stream: "upstream", Attributes: map[string]any{"rate": 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	// The wedge is a race inside Toxiproxy: twenty reset connections lose it at least once
	// on a quiet machine, not always on a loaded one (a run beside the 1,000-fault soak missed it), so
	// the round is repeated until a removal met a wedged link.
	for round := 1; front.Wedged() == 0; round++ {
		if round > 5 {
			t.Fatal("the link did not wedge in 5 rounds: the test did not test the recovery")
		}
		if err := front.Add(0, Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 5}}); err != nil {
			t.Fatal(err)
		}
		wedgeALink(t, front.Addrs()[0])
		done := make(chan error, 1)
		go func() { done <- front.Remove(0, "slow") }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Remove of a toxic on a wedged link did not return within a minute")
		}
	}
	names := front.toxicNames(0)
	if len(names) != 1 || names[0] != "kept" {
		t.Fatalf("toxics after the removal: %v, want [kept]", names)
	}
	// The proxy still forwards.
	c, err := net.DialTimeout("tcp", front.Addrs()[0], 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1024)); err != nil {
		t.Fatalf("reading through the proxy after the removal: %v", err)
	}
}

// wedgeALink opens connections through the proxy to the streaming upstream
// and resets them while data flows, until one leaves a link whose writer has
// exited with chunks still queued in its toxics.
func wedgeALink(t *testing.T, addr string) {
	t.Helper()
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 64<<10)); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
}
