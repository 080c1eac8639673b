package protocol

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// newLike returns a new zero message of the same type as m.
func newLike(m wireMessage) wireMessage {
	return reflect.New(reflect.TypeOf(m).Elem()).Interface().(wireMessage)
}

func TestRoundTrip(t *testing.T) {
	seen := make(map[string]bool)
	for _, c := range roundTripCases() {
		t.Run(c.name, func(t *testing.T) {
			seen[reflect.TypeOf(c.msg).Elem().Name()] = true
			enc := c.msg.AppendTo(nil)
			got := newLike(c.msg)
			if err := got.ReadFrom(enc); err != nil {
				t.Fatalf("decoding %x: %v", enc, err)
			}
			if !reflect.DeepEqual(got, c.msg) {
				t.Fatalf("round trip changed the message\n got: %+v\nwant: %+v", got, c.msg)
			}
			if again := got.AppendTo(nil); !bytes.Equal(again, enc) {
				t.Fatalf("re-encoding differs\n got: %x\nwant: %x", again, enc)
			}
		})
	}
	// Every request and response type of every key needs a case.
	for _, api := range MirrorAPIs() {
		for _, m := range []any{api.newRequest(), api.newResponse()} {
			if name := reflect.TypeOf(m).Elem().Name(); !seen[name] {
				t.Errorf("no round-trip case for %s", name)
			}
		}
	}
}

// TestTruncatedAndTrailing checks every strict prefix of every encoding
// fails (decoding is prefix-determined, so a prefix can never be a whole
// message) and that one extra byte fails too.
func TestTruncatedAndTrailing(t *testing.T) {
	for _, c := range roundTripCases() {
		enc := c.msg.AppendTo(nil)
		for i := range enc {
			err := newLike(c.msg).ReadFrom(enc[:i])
			if !errors.Is(err, ErrMalformedMessage) {
				t.Fatalf("%s: prefix of %d/%d bytes: got %v, want ErrMalformedMessage", c.name, i, len(enc), err)
			}
		}
		err := newLike(c.msg).ReadFrom(append(enc, 0))
		if !errors.Is(err, ErrMalformedMessage) || !strings.Contains(err.Error(), "unexpected bytes") {
			t.Fatalf("%s: trailing byte: got %v", c.name, err)
		}
	}
}

// TestGoldenAddTopicsToMirrorRequest pins the encoding to bytes written by
// hand from KIP-482: compact lengths are uvarint(n+1), tagged sections are
// uvarint count then (uvarint tag, uvarint size, bytes) in tag order.
func TestGoldenAddTopicsToMirrorRequest(t *testing.T) {
	golden := unhex(t, `
		03 6d 31                                  MirrorName "m1"
		02                                        Topics: 1 element
		   02 74                                  Name "t"
		   000102030405060708090a0b0c0d0e0f       TopicID
		   00000003                               NumPartitions 3
		   00                                     no tags
		03                                        3 tags
		   00 05  02 04 61 2e 2a                  tag 0 IncludePatterns ["a.*"]
		   02 01  ab                              tag 2 unknown
		   80 01 00                               tag 128 (2-byte uvarint), empty
	`)
	msg := &AddTopicsToMirrorRequest{
		MirrorName:      "m1",
		Topics:          []AddTopicsToMirrorRequestTopic{{Name: "t", TopicID: uuid1, NumPartitions: 3}},
		IncludePatterns: []string{"a.*"},
		UnknownTags:     tagsOf(128, "", 2, "\xab"),
	}
	checkGolden(t, msg, golden)
}

func TestGoldenReadMirrorStateResponse(t *testing.T) {
	golden := unhex(t, `
		000000fa              ThrottleMillis 250
		0000                  ErrorCode 0
		00                    ErrorMessage null
		02                    Topics: 1
		   02 74              Name "t"
		   02                 Partitions: 1
		      00000001        Partition 1
		      05              State FAILED
		      01              PreviousState MIRRORING
		      0002            RetryAttempt 2
		      000000000000002a LastMirroredOffset 42
		      0000            ErrorCode 0
		      02 78           ErrorMessage "x"
		      00              no tags
		   00                 no tags
		00                    no tags
	`)
	msg := &ReadMirrorStateResponse{ThrottleMillis: 250, Topics: []ReadMirrorStateResponseTopic{{Name: "t",
		Partitions: []ReadMirrorStateResponsePartition{{Partition: 1, State: MirrorStateFailed, PreviousState: MirrorStateMirroring,
			RetryAttempt: 2, LastMirroredOffset: 42, ErrorMessage: strp("x")}}}}}
	checkGolden(t, msg, golden)
}

// TestGoldenMirrorKeyHeaders pins every mirror RPC's key on the wire: the
// request header kgo would write (v2, null client id) and the response
// header v1 the proxy answers with.
func TestGoldenMirrorKeyHeaders(t *testing.T) {
	want := map[string]string{
		"CreateMirror": "03e8", "AddTopicsToMirror": "03e9", "RemoveTopicsFromMirror": "03ea",
		"LastMirroredOffsets": "03eb", "ListMirrors": "03ec", "DescribeMirrors": "03ed",
		"ReadMirrorState": "03ee", "WriteMirrorState": "03ef", "PauseMirrorTopics": "03f0",
		"ResumeMirrorTopics": "03f1", "DeleteMirror": "03f2", "SwitchRoute": "03f3",
	}
	for _, api := range MirrorAPIs() {
		golden := unhex(t, want[api.Name]+" 0000 00000009 ffff 00")
		got := AppendRequestHeader(nil, RequestHeader{APIKey: RequestForKey(api.Key).Key(), CorrelationID: 9, Flexible: true})
		if !bytes.Equal(got, golden) {
			t.Errorf("%s request header %x, want %x", api.Name, got, golden)
		}
		h, _, err := ParseRequestHeader(golden)
		if err != nil || h.APIKey != api.Key || !h.Flexible {
			t.Errorf("%s: parsed %+v, %v", api.Name, h, err)
		}
		if v := ResponseHeaderVersion(api.Key, 0); v != 1 || ResponseForKey(api.Key).Key() != api.Key {
			t.Errorf("%s: response header v%d", api.Name, v)
		}
	}
}

// TestGoldenCreateMirrorFrame pins a whole request frame: size prefix,
// request header v2 (non-compact client id, then a tag section) and body.
func TestGoldenCreateMirrorFrame(t *testing.T) {
	golden := unhex(t, `
		0000002f                                  frame size 47
		03e8 0000 00000007                        key 1000, v0, correlation id 7
		0003 6b676f                               client id "kgo" (int16 length)
		00                                        header tags
		03 6472                                   MirrorName "dr"
		02                                        Configs: 1
		   12 626f6f7473747261702e73657276657273  Name "bootstrap.servers"
		   09 7372633a39303932                    Value "src:9092"
		   00                                     no tags
		00                                        no tags
	`)
	req := &CreateMirrorRequest{MirrorName: "dr", Configs: []CreateMirrorRequestConfig{{Name: "bootstrap.servers", Value: strp("src:9092")}}}
	payload := AppendRequestHeader(nil, RequestHeader{APIKey: KeyCreateMirror, CorrelationID: 7, ClientID: strp("kgo"), Flexible: true})
	frame := AppendFrame(nil, req.AppendTo(payload))
	if !bytes.Equal(frame, golden) {
		t.Fatalf("frame\n got: %x\nwant: %x", frame, golden)
	}
	// The same bytes through the read path.
	n, err := FrameSize(golden, 1<<20)
	if err != nil || n != len(golden) {
		t.Fatalf("FrameSize = %d, %v", n, err)
	}
	h, body, err := ParseRequestHeader(golden[4:])
	if err != nil {
		t.Fatal(err)
	}
	if h.APIKey != KeyCreateMirror || !h.Flexible || h.CorrelationID != 7 || *h.ClientID != "kgo" || h.Len != 14 {
		t.Fatalf("header %+v", h)
	}
	var got CreateMirrorRequest
	if err := got.ReadFrom(body); err != nil || !reflect.DeepEqual(&got, req) {
		t.Fatalf("body: %+v, %v", got, err)
	}
}

func checkGolden(t *testing.T, msg wireMessage, golden []byte) {
	t.Helper()
	if enc := msg.AppendTo(nil); !bytes.Equal(enc, golden) {
		t.Fatalf("encoding\n got: %x\nwant: %x", enc, golden)
	}
	got := newLike(msg)
	if err := got.ReadFrom(golden); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, msg) {
		t.Fatalf("decoding\n got: %+v\nwant: %+v", got, msg)
	}
}

// unhex reads hex digits, ignoring whitespace and anything after them on a
// line (the annotations).
func unhex(t *testing.T, s string) []byte {
	t.Helper()
	var digits strings.Builder
	for line := range strings.SplitSeq(s, "\n") {
		for _, field := range strings.Fields(line) {
			if _, err := hex.DecodeString(field); err != nil {
				break // annotation starts
			}
			digits.WriteString(field)
		}
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEmptyArraysEncodeLikeNil: non-nullable arrays have no null on the
// wire, so nil and empty must produce the same bytes and decode to nil; an
// empty known tagged field is the default and is not written at all.
func TestEmptyArraysEncodeLikeNil(t *testing.T) {
	withNil := &AddTopicsToMirrorRequest{MirrorName: "m"}
	withEmpty := &AddTopicsToMirrorRequest{MirrorName: "m", Topics: []AddTopicsToMirrorRequestTopic{},
		IncludePatterns: []string{}, ExcludePatterns: []string{}}
	a, b := withNil.AppendTo(nil), withEmpty.AppendTo(nil)
	if !bytes.Equal(a, b) {
		t.Fatalf("nil %x != empty %x", a, b)
	}
	var got AddTopicsToMirrorRequest
	if err := got.ReadFrom(b); err != nil || got.Topics != nil || got.IncludePatterns != nil {
		t.Fatalf("got %+v, %v", got, err)
	}
	// A tagged field present on the wire with zero elements decodes as nil too.
	present := unhex(t, "02 6d 01 01 00 01 01")
	if err := got.ReadFrom(present); err != nil || got.IncludePatterns != nil {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestUnknownTagsSkipKnownNumbers(t *testing.T) {
	// An unknown tag that reuses a known field's number is dropped, not
	// written as a second value for that field.
	msg := &RemoveTopicsFromMirrorRequest{MirrorName: "m", Patterns: []string{"p"}, UnknownTags: tagsOf(0, "\x01")}
	var got RemoveTopicsFromMirrorRequest
	if err := got.ReadFrom(msg.AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Patterns, []string{"p"}) || got.UnknownTags.Len() != 0 {
		t.Fatalf("got %+v", got)
	}
}

// TestHostileInput feeds hand-built bytes that must be refused with
// ErrMalformedMessage.
func TestHostileInput(t *testing.T) {
	for _, c := range []struct {
		name string
		msg  wireMessage
		in   string
		want string
	}{
		{"null name", &DeleteMirrorRequest{}, "00 00", "null in a non-nullable string"},
		{"name past end", &DeleteMirrorRequest{}, "05 61 00", "ends in the middle of a field"},
		{"name over 32767", &DeleteMirrorRequest{}, "81 80 02" + strings.Repeat("61", 32768) + "00", "exceeds Kafka's limit"},
		{"null array", &DescribeMirrorsRequest{}, "00 00", "null in a non-nullable array"},
		{"array longer than input", &DescribeMirrorsRequest{}, "ff ff ff ff 07 00", "array claims"},
		{"int32 array needs 4 bytes each", &ReadMirrorStateRequest{}, "02 6d 02 02 74 03 00000001 0000", "array claims"},
		{"struct array needs min size each", &ReadMirrorStateResponse{}, "00000000 0000 00 02 02 74 05" + strings.Repeat("00", 20), "array claims"},
		{"varint overflow", &DeleteMirrorRequest{}, "ff ff ff ff ff 01", "ends in the middle of a field"},
		{"tag count larger than input", &DeleteMirrorRequest{}, "02 6d 05 00 00", "tag section claims"},
		{"tag size past end", &DeleteMirrorRequest{}, "02 6d 01 03 09 00", "ends in the middle of a field"},
		{"duplicate unknown tag", &DeleteMirrorRequest{}, "02 6d 02 03 00 03 00", "tag 3 appears twice"},
		{"duplicate known tag", &RemoveTopicsFromMirrorRequest{}, "02 6d 01 02 00 01 01 00 01 01", "tag 0 appears twice"},
		{"known tag with extra bytes", &RemoveTopicsFromMirrorRequest{}, "02 6d 01 01 00 02 01 ff", "tagged field 0"},
		{"known tag truncated", &RemoveTopicsFromMirrorRequest{}, "02 6d 01 01 00 02 02 05", "tagged field 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.msg.ReadFrom(unhex(t, c.in))
			if !errors.Is(err, ErrMalformedMessage) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrMalformedMessage containing %q", err, c.want)
			}
		})
	}
}

// TestHostileLengthsDoNotAllocate decodes inputs that claim huge arrays,
// strings and tags and checks the decoder allocates next to nothing.
func TestHostileLengthsDoNotAllocate(t *testing.T) {
	huge := "ff ff ff ff 0f" // uvarint 2^32-1
	for _, c := range []struct {
		msg wireMessage
		in  string
	}{
		{&DescribeMirrorsRequest{}, huge},
		{&DeleteMirrorRequest{}, huge},
		{&DeleteMirrorRequest{}, "02 6d" + huge},
		{&CreateMirrorRequest{}, "02 6d" + huge},
		{&LastMirroredOffsetsResponse{}, "00000000 0000" + huge},
	} {
		in := unhex(t, c.in)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 100 {
			if err := c.msg.ReadFrom(in); err == nil {
				t.Fatalf("%T accepted %x", c.msg, in)
			}
		}
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Fatalf("%T: 100 decodes of %d bytes allocated %d bytes", c.msg, len(in), grew)
		}
	}
}

// TestFailedDecodeKeepsMessage: ReadFrom replaces the message only on success.
func TestFailedDecodeKeepsMessage(t *testing.T) {
	req := &DeleteMirrorRequest{MirrorName: "keep"}
	if err := req.ReadFrom([]byte{0x05}); err == nil {
		t.Fatal("accepted truncated input")
	}
	if req.MirrorName != "keep" {
		t.Fatalf("message changed to %+v", req)
	}
}

func TestUnsupportedVersion(t *testing.T) {
	req := &DeleteMirrorRequest{Version: 1}
	err := req.ReadFrom(req.AppendTo(nil))
	if err == nil || !strings.Contains(err.Error(), "DeleteMirror v1 is not supported") {
		t.Fatalf("got %v", err)
	}
}

// TestMinimumElementSizes: the zero element is the smallest encoding, so
// the count bound in readArray is exact. Spot-check two against the wire
// layout written out by hand.
func TestMinimumElementSizes(t *testing.T) {
	if n := len((&ReadMirrorStateResponsePartition{}).appendTo(nil)); n != 4+1+1+2+8+2+1+1 {
		t.Errorf("ReadMirrorStateResponsePartition minimum is %d", n)
	}
	if n := len((&AddTopicsToMirrorRequestTopic{}).appendTo(nil)); n != 1+16+4+1 {
		t.Errorf("AddTopicsToMirrorRequestTopic minimum is %d", n)
	}
}

func TestKmsgInterfaces(t *testing.T) {
	for _, api := range MirrorAPIs() {
		req, resp := RequestForKey(api.Key), ResponseForKey(api.Key)
		if req.Key() != api.Key || resp.Key() != api.Key || req.MaxVersion() != api.MaxVersion || !req.IsFlexible() || !resp.IsFlexible() {
			t.Errorf("%s: key/version/flexible mismatch", api.Name)
		}
		if _, ok := req.(kmsg.AdminRequest); ok {
			t.Errorf("%s: must not be an AdminRequest, kgo would route it to the controller", api.Name)
		}
		if reflect.TypeOf(req.ResponseKind()) != reflect.TypeOf(resp) || reflect.TypeOf(resp.RequestKind()) != reflect.TypeOf(req) {
			t.Errorf("%s: ResponseKind/RequestKind do not pair up", api.Name)
		}
		tr, ok := resp.(interface {
			kmsg.ThrottleResponse
			kmsg.SetThrottleResponse
		})
		if !ok {
			t.Fatalf("%s response is not a kmsg.ThrottleResponse", api.Name)
		}
		tr.SetThrottle(77)
		if millis, after := tr.Throttle(); millis != 77 || !after {
			t.Errorf("%s: Throttle() = %d, %v", api.Name, millis, after)
		}
		// ThrottleMillis is the first field on the wire.
		if enc := resp.AppendTo(nil); !bytes.Equal(enc[:4], []byte{0, 0, 0, 77}) {
			t.Errorf("%s: response starts %x", api.Name, enc[:4])
		}
	}
	if RequestForKey(3) != nil || ResponseForKey(3) != nil {
		t.Error("RequestForKey answers a standard key")
	}
}

func TestDefaults(t *testing.T) {
	if v := NewAddTopicsToMirrorRequestTopic(); v.NumPartitions != -1 {
		t.Errorf("NumPartitions default %d", v.NumPartitions)
	}
	if v := NewLastMirroredOffsetsResponsePartition(); v.LastMirroredOffset != -1 {
		t.Errorf("LastMirroredOffset default %d", v.LastMirroredOffset)
	}
	if v := NewDescribeMirrorsResponsePartition(); v.LastMirroredOffset != -1 || v.Lag != -1 || v.State != "UNKNOWN" {
		t.Errorf("describe partition defaults %+v", v)
	}
	if v := NewReadMirrorStateResponsePartition(); v.State != MirrorStateUnknown || v.PreviousState != MirrorStateUnknown || v.LastMirroredOffset != -1 {
		t.Errorf("read state defaults %+v", v)
	}
	if v := NewWriteMirrorStateRequestPartition(); v.State != MirrorStateUnknown || v.LastMirroredOffset != -1 {
		t.Errorf("write state defaults %+v", v)
	}
}

// TestTruncationIsWrapped: callers can test for either sentinel.
func TestTruncationIsWrapped(t *testing.T) {
	err := (&DeleteMirrorRequest{}).ReadFrom(nil)
	if !errors.Is(err, ErrMalformedMessage) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v", err)
	}
}

// TestAppendTagsOrder: known and unknown tags interleave in tag order.
// Today's known tags are 0 and 1, so only a direct call can show it.
func TestAppendTagsOrder(t *testing.T) {
	unknown := tagsOf(3, "\x03", 4, "\x04", 9, "\x09")
	got := appendTags(nil, &unknown,
		taggedField{5, true, func(dst []byte) []byte { return append(dst, 0x05) }},
		taggedField{4, false, nil}, // known but absent: unknown tag 4 is still dropped
	)
	want := unhex(t, "03  03 01 03  05 01 05  09 01 09")
	if !bytes.Equal(got, want) {
		t.Fatalf("got %x, want %x", got, want)
	}
}
