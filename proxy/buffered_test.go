package proxy

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKfakePipelinedResponsesFromBuffer pipelines Metadata (rewritten: broker addresses) and
// ListOffsets (forwarded as is) requests. Small responses that the reader's one read took whole
// are written to the client straight from its buffer (deliverBuffered), without a frame of
// their own: each must still arrive whole and in order, the Metadata ones rewritten to the
// proxy's addresses.
func TestKfakePipelinedResponsesFromBuffer(t *testing.T) {
	c := startKfake(t, 1)
	p := startProxy(t, c.ListenAddrs())
	conn := rawDial(t, p.AdvertisedAddr())
	metadataRoundTrip(t, conn, 0) // the broker listeners exist before the addresses are checked
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("pipeline-test"))
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 9
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 6
	// One write per request (kfake answers no request that follows another in one write);
	// the responses are read only once all are sent, so they queue up behind each other.
	for id := int32(1); id <= 8; id++ {
		var req kmsg.Request = md
		if id%2 == 0 {
			req = lo
		}
		if _, err := conn.Write(f.AppendRequest(nil, req, id)); err != nil {
			t.Fatal(err)
		}
	}
	addrs := proxyAddrs(p)
	for id := int32(1); id <= 8; id++ {
		fr := nextResponse(t, conn, id, time.Minute)
		if id%2 == 0 {
			resp := kmsg.NewPtrListOffsetsResponse()
			resp.Version = 6
			if err := resp.ReadFrom(fr[9:]); err != nil { // size, correlation id, tags
				t.Fatalf("ListOffsets response %d: %v", id, err)
			}
			continue
		}
		resp := kmsg.NewPtrMetadataResponse()
		resp.Version = 9
		if err := resp.ReadFrom(fr[9:]); err != nil {
			t.Fatalf("Metadata response %d: %v", id, err)
		}
		if len(resp.Brokers) == 0 {
			t.Fatalf("Metadata response %d lists no broker", id)
		}
		for _, b := range resp.Brokers {
			if a := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))); !addrs[a] {
				t.Fatalf("Metadata response %d: broker %d at %s, not one of the proxy's %v", id, b.NodeID, a, addrs)
			}
		}
	}
	if p.fromBuf.Load() == 0 {
		t.Fatal("no response was written from the reader's buffer")
	}
}
