package datapath

import (
	"errors"
	"fmt"
	"testing"
)

func TestRetriableReadsTheOutermostMark(t *testing.T) {
	sentinel := NewPermanent("diverged")
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"unmarked", errors.New("broker away"), true},
		{"permanent", Permanent(errors.New("bad config")), false},
		{"wrapped sentinel", fmt.Errorf("partition 3: %w", sentinel), false},
		{"transient over a permanent sentinel", Transient(fmt.Errorf("giving up: %w", sentinel)), true},
		{"permanent over transient", Permanent(Transient(errors.New("x"))), false},
	} {
		if got := Retriable(c.err); got != c.want {
			t.Errorf("%s: Retriable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
	if !errors.Is(fmt.Errorf("ctx: %w", sentinel), sentinel) {
		t.Fatal("a wrapped sentinel is not errors.Is the sentinel")
	}
	if Permanent(nil) != nil || Transient(nil) != nil {
		t.Fatal("marking nil made an error")
	}
}

func TestGapNote(t *testing.T) {
	ev := Event{Kind: EventGapFilled, From: 100, To: 150}
	if want := "source offsets 100..149 were gone (source retention) before they were copied; the destination holds filler there, below its log start"; ev.Note() != want {
		t.Fatalf("note %q", ev.Note())
	}
	if (Event{Kind: EventFailed}).Note() != "" {
		t.Fatal("a failure has a note")
	}
}
