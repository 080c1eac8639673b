package protocol

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

func TestReadFrame(t *testing.T) {
	for _, c := range []struct {
		name    string
		in      []byte
		max     int32
		want    []byte
		wantErr error
	}{
		{"empty payload", []byte{0, 0, 0, 0}, 10, []byte{}, nil},
		{"payload", []byte{0, 0, 0, 3, 'a', 'b', 'c'}, 10, []byte("abc"), nil},
		{"exactly max", []byte{0, 0, 0, 3, 'a', 'b', 'c'}, 3, []byte("abc"), nil},
		{"one over max", []byte{0, 0, 0, 4, 'a', 'b', 'c', 'd'}, 3, nil, ErrFrameTooLarge},
		{"huge size, tiny input", []byte{0x7f, 0xff, 0xff, 0xff}, 1 << 20, nil, ErrFrameTooLarge},
		{"negative size", []byte{0xff, 0xff, 0xff, 0xfe}, 1 << 20, nil, ErrMalformedFrame},
		{"min int32 size", []byte{0x80, 0, 0, 0}, 1 << 20, nil, ErrMalformedFrame},
		{"clean EOF", nil, 10, nil, io.EOF},
		{"partial prefix", []byte{0, 0}, 10, nil, io.ErrUnexpectedEOF},
		{"partial payload", []byte{0, 0, 0, 3, 'a'}, 10, nil, io.ErrUnexpectedEOF},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReadFrame(bytes.NewReader(c.in), c.max)
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			}
			if !bytes.Equal(got, c.want) || (c.want != nil && got == nil) {
				t.Fatalf("payload = %q, want %q", got, c.want)
			}
		})
	}
}

func TestReadFrameCleanEOFIsUnwrapped(t *testing.T) {
	if _, err := ReadFrame(bytes.NewReader(nil), 10); err != io.EOF {
		t.Fatalf("got %#v, want io.EOF itself so callers can compare with ==", err)
	}
}

func TestReadFrameSequenceOneByteReads(t *testing.T) {
	stream := AppendFrame(AppendFrame(nil, []byte("first")), []byte("second"))
	r := iotest.OneByteReader(bytes.NewReader(stream))
	for _, want := range []string{"first", "second"} {
		got, err := ReadFrame(r, 100)
		if err != nil || string(got) != want {
			t.Fatalf("got %q, %v; want %q", got, err, want)
		}
	}
	if _, err := ReadFrame(r, 100); err != io.EOF {
		t.Fatalf("after last frame: %v", err)
	}
}

// TestReadFrameLarge crosses the eager-allocation threshold, where the
// buffer grows as data arrives.
func TestReadFrameLarge(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), (3*frameEagerAlloc+7)/16)
	payload = append(payload, "tail"...)
	got, err := ReadFrame(iotest.HalfReader(bytes.NewReader(AppendFrame(nil, payload))), int32(len(payload)))
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("large frame: %d bytes, %v", len(got), err)
	}
	// Announced large but cut short: an error, and a buffer no bigger
	// than what arrived (plus the eager part) was allocated.
	short := AppendFrame(nil, payload)[:frameEagerAlloc+100]
	if _, err := ReadFrame(bytes.NewReader(short), int32(len(payload))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short large frame: %v", err)
	}
}

func TestFrameSize(t *testing.T) {
	frame := AppendFrame(nil, []byte("abc"))
	for i := range len(frame) {
		if n, err := FrameSize(frame[:i], 10); n != 0 || err != nil {
			t.Fatalf("partial %d bytes: %d, %v", i, n, err)
		}
	}
	if n, err := FrameSize(frame, 10); n != 7 || err != nil {
		t.Fatalf("whole: %d, %v", n, err)
	}
	if n, err := FrameSize(append(frame, 0, 0, 0), 10); n != 7 || err != nil {
		t.Fatalf("whole plus next: %d, %v", n, err)
	}
	if n, err := FrameSize(frame, 3); n != 7 || err != nil {
		t.Fatalf("exactly max: %d, %v", n, err)
	}
	if _, err := FrameSize(frame[:4], 2); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("over max with prefix only: %v", err)
	}
	if _, err := FrameSize([]byte{0xff, 0xff, 0xff, 0xff}, 10); !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("negative: %v", err)
	}
}

func TestAppendFrame(t *testing.T) {
	if got := AppendFrame([]byte{9}, []byte{1, 2}); !bytes.Equal(got, []byte{9, 0, 0, 0, 2, 1, 2}) {
		t.Fatalf("got %x", got)
	}
}
