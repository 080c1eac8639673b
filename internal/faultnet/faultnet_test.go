package faultnet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/kmirror/kmirror/internal/kafkatest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
