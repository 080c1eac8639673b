package kafkatest

import (
	"strings"
	"testing"
)

// TestSendErrorsLeaveOutTheShutdownRace: a closing error on the value after the last one
// acknowledged is the tool's own shutdown race and is left out; the same error on an earlier
// value, or any other error, is a failed send.
func TestSendErrorsLeaveOutTheShutdownRace(t *testing.T) {
	ev := func(name, value, msg string) map[string]any {
		return map[string]any{"name": name, "value": value, "message": msg}
	}
	closing := "Producer closed while send in progress"
	for _, tc := range []struct {
		what   string
		events []map[string]any
		want   int
	}{
		{"the last send raced with close", []map[string]any{ev("producer_send_success", "0", ""), ev("producer_send_success", "1", ""), ev("producer_send_error", "2", closing)}, 0},
		{"the other closing error", []map[string]any{ev("producer_send_success", "0", ""), ev("producer_send_error", "1", "Cannot perform operation after producer has been closed")}, 0},
		{"a closing error before an acknowledged value", []map[string]any{ev("producer_send_error", "0", closing), ev("producer_send_success", "1", "")}, 1},
		{"another error on the last send", []map[string]any{ev("producer_send_success", "0", ""), ev("producer_send_error", "1", "This server is not the leader")}, 1},
	} {
		v := &Verifiable{events: tc.events}
		if got := v.SendErrors(); len(got) != tc.want {
			t.Errorf("%s: %d send errors (%s), want %d", tc.what, len(got), strings.Join(got, "; "), tc.want)
		}
	}
}
