package proxy

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestProduceAcks checks the acks parse against kmsg's encoding at every Produce version,
// with null, empty and long transactional ids.
func TestProduceAcks(t *testing.T) {
	long := string(make([]byte, 300))
	for v := int16(0); v <= kmsgMaxVersion(0); v++ {
		for _, tx := range []*string{nil, new(string), &long} {
			for _, acks := range []int16{-1, 0, 1} {
				req := kmsg.NewPtrProduceRequest()
				req.Version, req.Acks, req.TransactionID = v, acks, tx
				frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("c")).AppendRequest(nil, req, 9)
				h, err := parseRequestHeader(frame[4:])
				if err != nil {
					t.Fatalf("v%d: header: %v", v, err)
				}
				got, err := produceAcks(frame[4+h.bodyOff:], h.version, h.flexible)
				if err != nil || got != acks {
					t.Fatalf("v%d tx=%v acks=%d: got %d, %v", v, tx != nil, acks, got, err)
				}
			}
		}
	}
	if _, err := produceAcks([]byte{0x05}, 9, true); err == nil {
		t.Fatal("truncated compact transactional id accepted")
	}
	if _, err := produceAcks([]byte{0x00, 0x09, 'a'}, 3, false); err == nil {
		t.Fatal("truncated transactional id accepted")
	}
}

// FuzzParseRequestHeader: hostile bytes must never panic the header or acks parse.
func FuzzParseRequestHeader(f *testing.F) {
	f.Add(kmsg.NewRequestFormatter().AppendRequest(nil, kmsg.NewPtrProduceRequest(), 1)[4:])
	f.Add([]byte{0, 0, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, payload []byte) {
		h, err := parseRequestHeader(payload)
		if err != nil {
			return
		}
		if h.bodyOff > len(payload) {
			t.Fatalf("body offset %d beyond payload %d", h.bodyOff, len(payload))
		}
		_, _ = produceAcks(payload[h.bodyOff:], h.version, h.flexible)
	})
}
