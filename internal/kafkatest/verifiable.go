package kafkatest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Verifiable is a running Kafka Verifiable* tool (VerifiableProducer, VerifiableConsumer:
// the clients Kafka's own system tests use) and the JSON events it printed.
type Verifiable struct {
	pid     int
	mu      sync.Mutex
	events  []map[string]any
	done    chan struct{} // closed once the tool exited and its output was read
	exitErr error         // how it exited, set before done is closed
	stderr  []byte        // the tail of what it wrote to stderr (its log)
}

// stderrTail bounds what a Verifiable keeps of a tool's log.
const stderrTail = 256 << 10

// Stderr is the tail of what the tool logged.
func (v *Verifiable) Stderr() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return string(v.stderr)
}

// StartVerifiable starts the tool class with args; it is killed when the test ends.
func StartVerifiable(t *testing.T, ctx context.Context, class string, args ...string) *Verifiable {
	t.Helper()
	cmd, err := ToolCommand(ctx, class, args...)
	if err != nil {
		t.Fatal(err)
	}
	// KMIRROR_TOOL_LOG4J: a log4j2 configuration for the tools (e.g. the NetworkClient at
	// DEBUG), to see what a client does at a switch.
	if f := os.Getenv("KMIRROR_TOOL_LOG4J"); f != "" {
		for i, a := range cmd.Args {
			if strings.HasPrefix(a, "-Dlog4j2.configurationFile=") {
				cmd.Args[i] = "-Dlog4j2.configurationFile=" + f
			}
		}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	v := &Verifiable{done: make(chan struct{})}
	cmd.Stderr = &prefixWriter{t: t, prefix: class, v: v}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	v.pid = cmd.Process.Pid
	go func() {
		defer close(v.done)
		defer func() { v.exitErr = cmd.Wait() }() // after the last line: Wait closes the pipe
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				v.mu.Lock()
				v.events = append(v.events, ev)
				v.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-v.done })
	return v
}

// Exited reports whether the tool exited, and how (nil: status 0).
func (v *Verifiable) Exited() (bool, error) {
	select {
	case <-v.done:
		return true, v.exitErr
	default:
		return false, nil
	}
}

// LastEvent is the tool's last event (nil before its first).
func (v *Verifiable) LastEvent() map[string]any {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.events) == 0 {
		return nil
	}
	return v.events[len(v.events)-1]
}

// Values are the "value" fields of the events named name, in order.
func (v *Verifiable) Values(name string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for _, ev := range v.events {
		if ev["name"] == name {
			out = append(out, fmt.Sprint(ev["value"]))
		}
	}
	return out
}

// Consumed is one record_data event of VerifiableConsumer --verbose.
type Consumed struct {
	Partition int32
	Offset    int64
	Value     string
}

// Records are the records the consumer printed, in order.
func (v *Verifiable) Records() []Consumed {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []Consumed
	for _, ev := range v.events {
		if ev["name"] == "record_data" {
			p, _ := ev["partition"].(float64)
			o, _ := ev["offset"].(float64)
			out = append(out, Consumed{Partition: int32(p), Offset: int64(o), Value: fmt.Sprint(ev["value"])})
		}
	}
	return out
}

// Last renders the tool's n last events.
func (v *Verifiable) Last(n int) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	b, _ := json.Marshal(v.events[max(0, len(v.events)-n):])
	return string(b)
}

// Stop asks the tool to shut down (SIGTERM: it prints what it finished) and waits for it.
func (v *Verifiable) Stop(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(v.pid, syscall.SIGTERM)
	select {
	case <-v.done:
	case <-time.After(30 * time.Second):
		t.Errorf("tool %d did not stop on SIGTERM within 30s", v.pid)
	}
}

// prefixWriter logs a tool's stderr lines into the test log and keeps their tail.
type prefixWriter struct {
	t      *testing.T
	prefix string
	v      *Verifiable
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	w.t.Logf("%s: %s", w.prefix, b)
	w.v.mu.Lock()
	w.v.stderr = append(w.v.stderr, b...)
	if n := len(w.v.stderr); n > stderrTail {
		w.v.stderr = w.v.stderr[n-stderrTail:]
	}
	w.v.mu.Unlock()
	return len(b), nil
}

var _ io.Writer = (*prefixWriter)(nil)

// Events are copies of the events named name, in order.
func (v *Verifiable) Events(name string) []map[string]any {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []map[string]any
	for _, ev := range v.events {
		if ev["name"] == name {
			out = append(out, ev)
		}
	}
	return out
}

// SendErrors renders VerifiableProducer's producer_send_error events whole (exception, message,
// value): a failed send's count alone does not say which error the client took as final, and
// that is what a failure report needs. Left out: a send the tool itself raced with its own
// shutdown. On SIGTERM its hook closes the producer while the main thread may be about to send
// its next value, which then fails with one of KafkaProducer's closing errors (Kafka 4.4's
// VerifiableProducer; a CI run of 2026-12-07 failed on that one error, every acknowledged value
// contiguous before it). Such an error counts only when it names a value below the highest
// one acknowledged: then it is not the last send, and a real failure.
func (v *Verifiable) SendErrors() []string {
	highest := int64(-1)
	for _, s := range v.Values("producer_send_success") {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			highest = max(highest, n)
		}
	}
	var out []string
	for _, ev := range v.Events("producer_send_error") {
		if n, err := strconv.ParseInt(fmt.Sprint(ev["value"]), 10, 64); err == nil && n > highest && closingError(fmt.Sprint(ev["message"])) {
			continue
		}
		b, _ := json.Marshal(ev)
		out = append(out, string(b))
	}
	return out
}

// closingError: msg is one of the errors KafkaProducer gives a send that meets close().
func closingError(msg string) bool {
	return strings.Contains(msg, "Producer closed while send in progress") ||
		strings.Contains(msg, "Cannot perform operation after producer has been closed")
}
