// Package polltest waits for conditions in tests: poll with backoff until
// the condition holds or a deadline passes, never a bare sleep.
package polltest

import (
	"testing"
	"time"
)

// Eventually polls cond (which also says what it saw) until it holds, and
// fails the test with what it last saw when d passes.
func Eventually(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	wait := 20 * time.Millisecond
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s: %s", d, what, detail)
		}
		time.Sleep(wait)
		wait = min(wait*2, 500*time.Millisecond)
	}
}

// Until is Eventually for a condition that has nothing to say about what it saw.
func Until(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, d, what, func() (bool, string) { return cond(), "still not so" })
}
