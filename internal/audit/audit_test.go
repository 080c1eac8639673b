package audit

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func TestLogOneJSONLine(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf)
	l.now = func() time.Time { return time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC) }
	l.Log(Event{Client: "127.0.0.1:5000", Listener: "bootstrap", Principal: "User:alice", API: "CreateMirror", APIKey: 1000,
		Mirror: "m", Decision: Refused, Reason: "ALTER on CLUSTER denied", ErrorCode: 144})
	line := buf.Bytes()
	if bytes.Count(line, []byte("\n")) != 1 {
		t.Fatalf("want one line, got %q", line)
	}
	var got map[string]any
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"audit": true, "principal": "User:alice", "decision": "refused", "time": "2026-12-02T06:00:00Z", "mirror": "m"} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
}

func TestNilLoggerDiscards(t *testing.T) {
	var l *Logger
	l.Log(Event{API: "x"}) // must not panic
}
