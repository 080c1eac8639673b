package protocol

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestParseRequestHeader(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		want RequestHeader
		body string
	}{
		{"v1 Metadata v9 is not flexible", "0003 0008 0000002a 0003 616263 ff",
			RequestHeader{APIKey: 3, APIVersion: 8, CorrelationID: 42, ClientID: strp("abc"), Len: 13}, "ff"},
		{"v2 Metadata v9 flexible", "0003 0009 0000002a 0003 616263 00 ff",
			RequestHeader{APIKey: 3, APIVersion: 9, CorrelationID: 42, ClientID: strp("abc"), Flexible: true, Len: 14}, "ff"},
		{"null client id", "0003 0009 00000001 ffff 00",
			RequestHeader{APIKey: 3, APIVersion: 9, CorrelationID: 1, Flexible: true, Len: 11}, ""},
		{"other negative client id length is null, as in Java", "0003 0001 00000001 fffe",
			RequestHeader{APIKey: 3, APIVersion: 1, CorrelationID: 1, Len: 10}, ""},
		{"empty client id", "0003 0001 00000001 0000",
			RequestHeader{APIKey: 3, APIVersion: 1, CorrelationID: 1, ClientID: strp(""), Len: 10}, ""},
		{"header tags skipped", "03e8 0000 00000005 0001 6b 02 00 01 aa 7f 02 bbbb 03",
			RequestHeader{APIKey: KeyCreateMirror, CorrelationID: 5, ClientID: strp("k"), Flexible: true, Len: 19}, "03"},
		{"mirror key is flexible", "03f2 0000 00000005 ffff 00 0104",
			RequestHeader{APIKey: KeyDeleteMirror, CorrelationID: 5, Flexible: true, Len: 11}, "0104"},
		{"unknown key: v1 fields only", "7000 0003 00000009 0001 78 00 01",
			RequestHeader{APIKey: 0x7000, APIVersion: 3, CorrelationID: 9, ClientID: strp("x"), Len: 11}, "0001"},
		{"ControlledShutdown v0 has no client id", "0007 0000 00000004 0001",
			RequestHeader{APIKey: 7, CorrelationID: 4, Len: 8}, "0001"},
		{"ApiVersions v3 request is flexible", "0012 0003 00000000 0003 6b676f 00 04",
			RequestHeader{APIKey: 18, APIVersion: 3, ClientID: strp("kgo"), Flexible: true, Len: 14}, "04"},
	} {
		t.Run(c.name, func(t *testing.T) {
			payload := unhex(t, c.in)
			h, body, err := ParseRequestHeader(payload)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(h, c.want) {
				t.Fatalf("header\n got %+v\nwant %+v", h, c.want)
			}
			if !bytes.Equal(body, unhex(t, c.body)) || !bytes.Equal(body, payload[h.Len:]) {
				t.Fatalf("body %x", body)
			}
			if len(body) > 0 && &body[0] != &payload[h.Len] {
				t.Fatal("body is a copy, want a sub-slice")
			}
			// The proxy's hot path: the same header without the client id.
			peeked, err := PeekRequestHeader(payload)
			c.want.ClientID = nil
			if err != nil || !reflect.DeepEqual(peeked, c.want) {
				t.Fatalf("PeekRequestHeader = %+v, %v; want %+v", peeked, err, c.want)
			}
		})
	}
}

func TestParseRequestHeaderMalformed(t *testing.T) {
	for _, in := range []string{
		"",
		"0003 0009 000000",
		"0003 0009 00000001",                     // no client id length
		"0003 0009 00000001 00",                  // half a length
		"0003 0009 00000001 0005 61",             // client id past end
		"0003 0009 00000001 ffff",                // flexible, no tag section
		"0003 0009 00000001 ffff 01 00 05 aa",    // tag past end
		"0003 0009 00000001 ffff 05 00 00",       // more tags than bytes
		"0003 0009 00000001 ffff ff ff ff ff ff", // uvarint overflow
	} {
		if _, _, err := ParseRequestHeader(unhex(t, in)); !errors.Is(err, ErrMalformedFrame) {
			t.Errorf("%q: got %v, want ErrMalformedFrame", in, err)
		}
		if _, err := PeekRequestHeader(unhex(t, in)); !errors.Is(err, ErrMalformedFrame) {
			t.Errorf("%q: PeekRequestHeader: got %v, want ErrMalformedFrame", in, err)
		}
	}
	// Past the fixed fields, a failed peek still says which request it was.
	h, err := PeekRequestHeader(unhex(t, "0003 0009 00000007 0005 61"))
	if err == nil || h.APIKey != 3 || h.APIVersion != 9 || h.CorrelationID != 7 {
		t.Errorf("peek of a client id past the end: %+v, %v", h, err)
	}
}

func TestPeekRequestHeaderDoesNotAllocate(t *testing.T) {
	payload := unhex(t, "0000 0009 00000001 0008 70726f6475636572 00 ff")
	PeekRequestHeader(payload) // build the flexible-versions table
	if n := testing.AllocsPerRun(100, func() { _, _ = PeekRequestHeader(payload) }); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}

func TestAppendRequestHeaderRoundTrip(t *testing.T) {
	for _, h := range []RequestHeader{
		{APIKey: 3, APIVersion: 12, CorrelationID: -5, ClientID: strp("client"), Flexible: true},
		{APIKey: 3, APIVersion: 1, CorrelationID: 1 << 30},
		{APIKey: KeyDescribeMirrors, CorrelationID: 3, ClientID: strp("")},
		{APIKey: 7, APIVersion: 0, CorrelationID: 2},
	} {
		flexible, _ := IsFlexibleRequest(h.APIKey, h.APIVersion)
		h.Flexible = flexible
		payload := append(AppendRequestHeader(nil, h), "body"...)
		got, body, err := ParseRequestHeader(payload)
		if err != nil {
			t.Fatal(err)
		}
		h.Len = len(payload) - 4
		if !reflect.DeepEqual(got, h) || string(body) != "body" {
			t.Fatalf("got %+v %q, want %+v", got, body, h)
		}
	}
}

// TestMatchesKmsgFormatter: our header writer and kmsg's agree byte for
// byte, for a standard flexible request and for a mirror request.
func TestMatchesKmsgFormatter(t *testing.T) {
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("kmirror"))
	for _, req := range []kmsg.Request{kmsg.NewPtrMetadataRequest(), &DeleteMirrorRequest{MirrorName: "m"}, kmsg.NewPtrSASLHandshakeRequest()} {
		req.SetVersion(req.MaxVersion())
		want := f.AppendRequest(nil, req, 77)
		payload := AppendRequestHeader(nil, RequestHeader{APIKey: req.Key(), APIVersion: req.GetVersion(), CorrelationID: 77,
			ClientID: strp("kmirror"), Flexible: req.IsFlexible()})
		if got := AppendFrame(nil, req.AppendTo(payload)); !bytes.Equal(got, want) {
			t.Errorf("%T:\n got %x\nwant %x", req, got, want)
		}
	}
}

func TestIsFlexibleRequest(t *testing.T) {
	for _, c := range []struct {
		key, version    int16
		flexible, known bool
	}{
		{0, 8, false, true},              // Produce v8
		{0, 9, true, true},               // Produce v9 is the first flexible
		{0, 1000, true, true},            // newer than kmsg knows: still flexible
		{18, 2, false, true},             // ApiVersions
		{18, 3, true, true},              //
		{17, 1, false, true},             // SaslHandshake: never flexible
		{KeyCreateMirror, 0, true, true}, // 1000: from the mirror table
		{KeyDeleteMirror, 0, true, true}, //
		{KeyDeleteMirror, 5, true, true}, // unsupported version, but flexible: v0 is
		{94, 0, true, true},              // UnregisterController: Kafka's again since the move to 1000
		{0x7000, 0, false, false},        // unknown
		{-1, 0, false, false},            //
	} {
		flexible, known := IsFlexibleRequest(c.key, c.version)
		if flexible != c.flexible || known != c.known {
			t.Errorf("IsFlexibleRequest(%d, %d) = %v, %v; want %v, %v", c.key, c.version, flexible, known, c.flexible, c.known)
		}
	}
	// Cross-check the precomputed table against kmsg for every key and
	// version kmsg knows (mirror keys excepted).
	for key := int16(0); key < 1024; key++ {
		req := kmsg.RequestForKey(key)
		if req == nil || IsMirrorKey(key) {
			continue
		}
		for v := int16(0); v <= req.MaxVersion(); v++ {
			req.SetVersion(v)
			if flexible, known := IsFlexibleRequest(key, v); flexible != req.IsFlexible() || !known {
				t.Errorf("key %d v%d: got %v, %v; kmsg says %v", key, v, flexible, known, req.IsFlexible())
			}
		}
	}
}

func TestIsFlexibleRequestDoesNotAllocate(t *testing.T) {
	IsFlexibleRequest(0, 9) // build the table
	if n := testing.AllocsPerRun(100, func() { IsFlexibleRequest(1, 12) }); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}

func TestResponseHeaderVersion(t *testing.T) {
	for _, c := range []struct{ key, version, want int16 }{
		{18, 0, 0}, {18, 4, 0}, // ApiVersions: always v0
		{3, 8, 0}, {3, 9, 1},
		{KeyDescribeMirrors, 0, 1},
		{0x7000, 0, 0},
	} {
		if got := ResponseHeaderVersion(c.key, c.version); got != c.want {
			t.Errorf("ResponseHeaderVersion(%d, %d) = %d, want %d", c.key, c.version, got, c.want)
		}
	}
}

func TestResponseHeader(t *testing.T) {
	v0 := AppendResponseHeader(nil, 42, 0)
	v1 := AppendResponseHeader(nil, 42, 1)
	if !bytes.Equal(v0, []byte{0, 0, 0, 42}) || !bytes.Equal(v1, []byte{0, 0, 0, 42, 0}) {
		t.Fatalf("v0 %x v1 %x", v0, v1)
	}
	id, body, err := ParseResponseHeader(append(v1, 9), 1)
	if err != nil || id != 42 || !bytes.Equal(body, []byte{9}) {
		t.Fatalf("v1: %d %x %v", id, body, err)
	}
	id, body, err = ParseResponseHeader(unhex(t, "0000002a 02 00 00 05 01 aa 09"), 1)
	if err != nil || id != 42 || !bytes.Equal(body, []byte{9}) {
		t.Fatalf("v1 with tags: %d %x %v", id, body, err)
	}
	id, body, err = ParseResponseHeader(append(v0, 9), 0)
	if err != nil || id != 42 || !bytes.Equal(body, []byte{9}) {
		t.Fatalf("v0: %d %x %v", id, body, err)
	}
	for _, bad := range [][]byte{nil, {0, 0, 0}, {0, 0, 0, 1}, {0, 0, 0, 1, 1, 0}} {
		if _, _, err := ParseResponseHeader(bad, 1); !errors.Is(err, ErrMalformedFrame) {
			t.Errorf("%x: got %v", bad, err)
		}
	}
	if _, _, err := ParseResponseHeader(v1, 2); err == nil {
		t.Error("header v2 accepted")
	}
}
