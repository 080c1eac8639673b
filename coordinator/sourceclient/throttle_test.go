package sourceclient

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
)

func TestMirrorClientIDs(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cache := NewCache()
	defer cache.Close()
	boot := strings.Join(c.ListenAddrs(), ",")
	for _, tc := range []struct{ mirror, override, want string }{
		{"dr", "", "kmirror-dr"},
		{"eu", "team-eu.mirror", "team-eu.mirror"},
	} {
		configs := map[string]string{"bootstrap.servers": boot}
		if tc.override != "" {
			configs["source.client.id"] = tc.override
		}
		cl, err := cache.Client(tc.mirror, configs)
		if err != nil {
			t.Fatal(err)
		}
		if got := cl.OptValue(kgo.ClientID); got != tc.want {
			t.Errorf("mirror %s (source.client.id %q): client id %v, want %s", tc.mirror, tc.override, got, tc.want)
		}
	}
	// A one-off client that belongs to no mirror (CreateMirror's check).
	opts, err := Options(mirrorconfigFor(boot))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got := cl.OptValue(kgo.ClientID); got != "kmirror-admin" {
		t.Errorf("one-off source client id %v, want kmirror-admin", got)
	}
}

// TestThrottledFetchHoldsTheConnection proves what the copy relies on for
// KIP-219: a Fetch sent as fetcher sends it (kgo.Broker.Request on the
// mirror's source client) whose response carries throttle_time_ms holds the
// next request on that connection back for that long (franz-go does it), and
// the throttle is recorded for the mirror's metric and describe note.
func TestThrottledFetchHoldsTheConnection(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const throttle = 400 * time.Millisecond
	var mu sync.Mutex
	var arrivals []time.Time
	c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		resp := kreq.ResponseKind().(*kmsg.FetchResponse)
		resp.ThrottleMillis = int32(throttle / time.Millisecond)
		return resp, nil, true
	})
	cache := NewCache()
	defer cache.Close()
	cl, err := cache.Client("dr", map[string]string{"bootstrap.servers": strings.Join(c.ListenAddrs(), ",")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const fetches = 3
	for range fetches {
		req := kmsg.NewPtrFetchRequest()
		req.SessionEpoch = -1
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "t"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		if _, err := cl.Broker(0).Request(ctx, req); err != nil {
			t.Fatalf("fetch: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != fetches {
		t.Fatalf("the broker saw %d fetches, want %d", len(arrivals), fetches)
	}
	for i := 1; i < fetches; i++ {
		// The broker answers at once: all of a gap is the client's wait (a
		// millisecond of slack for the clocks' rounding).
		if gap := arrivals[i].Sub(arrivals[i-1]); gap < throttle-time.Millisecond {
			t.Errorf("fetch %d arrived %s after the previous one's response said throttle %s", i+1, gap, throttle)
		}
	}
	th, ok := cache.Throttles().Recent("dr", time.Now())
	if !ok || th.ClientID != "kmirror-dr" || th.Total != fetches*throttle || th.Recent != fetches*throttle {
		t.Fatalf("recorded throttle %+v (recent: %v), want %s in total and recently for kmirror-dr", th, ok, fetches*throttle)
	}
	if _, ok := cache.Throttles().Recent("dr", time.Now().Add(ThrottleWindow+time.Second)); ok {
		t.Fatal("a throttle older than the window is still reported as recent")
	}
	cache.Drop("dr")
	if _, ok := cache.Throttles().Recent("dr", time.Now()); ok {
		t.Fatal("a dropped mirror still reports its throttling")
	}
}

func mirrorconfigFor(bootstrap string) mirrorconfig.Config {
	return mirrorconfig.Parse(map[string]string{"bootstrap.servers": bootstrap})
}
