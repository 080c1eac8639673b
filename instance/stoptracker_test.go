package instance

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/polltest"
)

// A part that does not stop is named in the log until it does.
func TestStopTrackerNamesWhatItWaitsFor(t *testing.T) {
	var (
		mu  sync.Mutex
		out bytes.Buffer
	)
	log := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(b) }), nil))
	s := newStopTracker(log)
	s.every = 10 * time.Millisecond
	release := make(chan struct{})
	s.run("quick", func() {})
	s.run("stuck part", func() { <-release })
	done := make(chan struct{})
	go func() { s.wait(); close(done) }()
	polltest.Until(t, 10*time.Second, "the stuck part named in the log", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(out.String(), `waiting_for="[stuck part]"`)
	})
	close(release)
	<-done
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
