package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

// The response reader: small reads come from one buffered read; a large read bypasses the
// buffer; appendBuffered hands out what is buffered and no more, and what follows it is read
// from the socket in order (relayResponse splices that part).
func TestResponseReadAhead(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	stream := make([]byte, 3*respBufferBytes)
	for i := range stream {
		stream[i] = byte(i * 7)
	}
	go func() {
		_, _ = a.Write(stream[:100])                      // two small frames in one segment
		_, _ = a.Write(stream[100 : respBufferBytes+500]) // a large one
		_, _ = a.Write(stream[respBufferBytes+500:])
	}()
	br := bufio.NewReaderSize(b, respBufferBytes)
	got := make([]byte, 0, len(stream))
	small := make([]byte, 40)
	if _, err := io.ReadFull(br, small); err != nil {
		t.Fatal(err)
	}
	got = append(got, small...)
	if br.Buffered() != 60 {
		t.Fatalf("after a 40-byte read of a 100-byte segment, %d bytes are buffered, want 60", br.Buffered())
	}
	got = appendBuffered(got, br, 1000) // no more than is buffered
	if br.Buffered() != 0 || len(got) != 100 {
		t.Fatalf("appendBuffered moved %d bytes, %d left buffered", len(got)-40, br.Buffered())
	}
	big := make([]byte, respBufferBytes+400)
	if _, err := io.ReadFull(br, big); err != nil {
		t.Fatal(err)
	}
	got = append(got, big...)
	rest := make([]byte, len(stream)-len(got))
	if _, err := io.ReadFull(br, rest); err != nil {
		t.Fatal(err)
	}
	got = append(got, rest...)
	if !bytes.Equal(got, stream) {
		t.Fatal("bytes out of order or altered")
	}
}

// With nothing owed the response goroutine waits in the upstream socket's read: a local
// answer queued meanwhile must end that wait, and the broker closing the idle connection
// must close the client's at once (not at its next request).
func TestIdleReaderWait(t *testing.T) {
	c := startKfake(t, 1)
	p := startProxy(t, c.ListenAddrs())
	conn := rawDial(t, p.Addr())
	metadataRoundTrip(t, conn, 1) // upstream dialled, the reader idle in its read

	var s *session
	polltest.Until(t, 5*time.Second, "the reader waits in the upstream socket", func() bool {
		p.sessions.Range(func(k, _ any) bool { s = k.(*session); return false })
		if s == nil {
			return false
		}
		s.readerMu.Lock()
		defer s.readerMu.Unlock()
		return s.readerIdle
	})
	for i := range 3 {
		resp := roundTrip(t, conn, protocol.NewPtrListMirrorsRequest(), int32(2+i)) // answered locally
		if v := fieldsOf(resp); v.msg != mirroringDisabledMessage {
			t.Fatalf("local answer %d: %+v", i, v)
		}
	}
	metadataRoundTrip(t, conn, 9) // and forwarding goes on after the kicks

	s.mu.Lock()
	up := s.upstream.(*net.TCPConn)
	s.mu.Unlock()
	// Reads of the upstream socket now end as if the broker had closed it.
	if err := up.CloseRead(); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, conn, "client of an upstream connection closed while idle")
}
