package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
)

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 'a', 'b', 'c'}, int32(10))
	f.Add([]byte{0, 0, 0, 3, 'a'}, int32(3))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, int32(10))
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 0}, int32(0x7fffffff))
	f.Add([]byte{0, 0}, int32(-1))
	f.Fuzz(func(t *testing.T, in []byte, max int32) {
		payload, err := ReadFrame(bytes.NewReader(in), max)
		n, sizeErr := FrameSize(in, max)
		// The blocking and the event-loop readers must agree on every input.
		switch {
		case err == nil:
			if sizeErr != nil || n != 4+len(payload) || !bytes.Equal(payload, in[4:n]) || int64(len(payload)) > int64(max) {
				t.Fatalf("ReadFrame ok (%d bytes) but FrameSize = %d, %v", len(payload), n, sizeErr)
			}
		case errors.Is(err, ErrFrameTooLarge), errors.Is(err, ErrMalformedFrame):
			if !errors.Is(sizeErr, ErrFrameTooLarge) && !errors.Is(sizeErr, ErrMalformedFrame) {
				t.Fatalf("ReadFrame: %v, FrameSize: %d, %v", err, n, sizeErr)
			}
		case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
			if n != 0 || sizeErr != nil {
				t.Fatalf("ReadFrame: %v, FrameSize: %d, %v", err, n, sizeErr)
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}

func FuzzFrameSize(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 'a', 'b', 'c', 0}, int32(10))
	f.Add([]byte{0, 0, 0, 3}, int32(3))
	f.Add([]byte{0x80, 0, 0, 0}, int32(10))
	f.Fuzz(func(t *testing.T, buf []byte, max int32) {
		n, err := FrameSize(buf, max)
		if err != nil {
			if n != 0 || len(buf) < 4 {
				t.Fatalf("error %v with n=%d, len=%d", err, n, len(buf))
			}
			return
		}
		if n == 0 {
			// More bytes must eventually settle it, the same way.
			if len(buf) >= 4 {
				size := int32(binary.BigEndian.Uint32(buf))
				if size < 0 || size > max || len(buf) >= 4+int(size) {
					t.Fatalf("asked for more bytes for a decided prefix %x (max %d, have %d)", buf[:4], max, len(buf))
				}
			}
			return
		}
		if n < 4 || n > len(buf) || int64(n-4) > int64(max) {
			t.Fatalf("n=%d for %d bytes, max %d", n, len(buf), max)
		}
		// Extra bytes after a whole frame do not change the answer.
		if n2, err2 := FrameSize(append(buf[:n:n], 1, 2, 3), max); n2 != n || err2 != nil {
			t.Fatalf("with trailing bytes: %d, %v", n2, err2)
		}
	})
}

func FuzzParseRequestHeader(f *testing.F) {
	f.Add([]byte("\x00\x03\x00\x09\x00\x00\x00\x2a\x00\x03abc\x00body"))
	f.Add([]byte("\x00\x03\x00\x08\x00\x00\x00\x2a\xff\xff"))
	f.Add([]byte("\x03\xe8\x00\x00\x00\x00\x00\x01\x00\x01k\x02\x00\x01\xaa\x7f\x02\xbb\xbb"))
	f.Add([]byte("\x00\x07\x00\x00\x00\x00\x00\x01"))
	f.Add([]byte("\x70\x00\x00\x01\x00\x00\x00\x01\x00\x00"))
	f.Fuzz(func(t *testing.T, payload []byte) {
		h, body, err := ParseRequestHeader(payload)
		if err != nil {
			if !errors.Is(err, ErrMalformedFrame) {
				t.Fatalf("error does not wrap ErrMalformedFrame: %v", err)
			}
			return
		}
		if h.Len < 8 || h.Len > len(payload) || !bytes.Equal(body, payload[h.Len:]) {
			t.Fatalf("Len %d of %d, body %x", h.Len, len(payload), body)
		}
		if flexible, _ := IsFlexibleRequest(h.APIKey, h.APIVersion); flexible != h.Flexible && !hasNoClientID(h.APIKey, h.APIVersion) {
			t.Fatalf("Flexible %v disagrees with IsFlexibleRequest", h.Flexible)
		}
		// Re-encoding gives the same header (header tags are dropped, so
		// Len may shrink) and the same body.
		again := append(AppendRequestHeader(nil, h), body...)
		h2, body2, err := ParseRequestHeader(again)
		if err != nil {
			t.Fatalf("re-encoded header %x: %v", again, err)
		}
		h.Len, h2.Len = 0, 0
		if !reflect.DeepEqual(h, h2) || !bytes.Equal(body, body2) {
			t.Fatalf("re-encoding changed the header: %+v -> %+v", h, h2)
		}
	})
}

// fuzzMirrorKey decodes the input as the key's request and as its
// response; whatever decodes must survive encode -> decode unchanged and
// re-encode to the same bytes.
func fuzzMirrorKey(f *testing.F, key int16) {
	for _, c := range roundTripCases() {
		if c.msg.Key() == key {
			f.Add(c.msg.AppendTo(nil))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, m := range []wireMessage{RequestForKey(key), ResponseForKey(key)} {
			if err := m.ReadFrom(in); err != nil {
				if !errors.Is(err, ErrMalformedMessage) {
					t.Fatalf("%T: error does not wrap ErrMalformedMessage: %v", m, err)
				}
				continue
			}
			enc := m.AppendTo(nil)
			back := newLike(m)
			if err := back.ReadFrom(enc); err != nil {
				t.Fatalf("%T: re-encoded %x does not decode: %v", m, enc, err)
			}
			if !reflect.DeepEqual(back, m) {
				t.Fatalf("%T: round trip changed the message\n got %+v\nwant %+v", m, back, m)
			}
			if again := back.AppendTo(nil); !bytes.Equal(again, enc) {
				t.Fatalf("%T: encoding is not stable: %x then %x", m, enc, again)
			}
		}
	})
}

func FuzzCreateMirror(f *testing.F)           { fuzzMirrorKey(f, KeyCreateMirror) }
func FuzzAddTopicsToMirror(f *testing.F)      { fuzzMirrorKey(f, KeyAddTopicsToMirror) }
func FuzzRemoveTopicsFromMirror(f *testing.F) { fuzzMirrorKey(f, KeyRemoveTopicsFromMirror) }
func FuzzLastMirroredOffsets(f *testing.F)    { fuzzMirrorKey(f, KeyLastMirroredOffsets) }
func FuzzListMirrors(f *testing.F)            { fuzzMirrorKey(f, KeyListMirrors) }
func FuzzDescribeMirrors(f *testing.F)        { fuzzMirrorKey(f, KeyDescribeMirrors) }
func FuzzReadMirrorState(f *testing.F)        { fuzzMirrorKey(f, KeyReadMirrorState) }
func FuzzWriteMirrorState(f *testing.F)       { fuzzMirrorKey(f, KeyWriteMirrorState) }
func FuzzPauseMirrorTopics(f *testing.F)      { fuzzMirrorKey(f, KeyPauseMirrorTopics) }
func FuzzResumeMirrorTopics(f *testing.F)     { fuzzMirrorKey(f, KeyResumeMirrorTopics) }
func FuzzDeleteMirror(f *testing.F)           { fuzzMirrorKey(f, KeyDeleteMirror) }
func FuzzSwitchRoute(f *testing.F)            { fuzzMirrorKey(f, KeySwitchRoute) }
