package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
)

// console is the terminal of `kmirror demo --switch`: a live line redrawn
// in place and event lines (the switch's steps) printed above it. The
// live line and the switch's follower print from different goroutines.
type console struct {
	mu   sync.Mutex
	w    io.Writer
	live bool // the cursor is at the end of a live line
}

// event prints a line of its own, over the live line if one is drawn: the
// next redraw puts the live line back under it.
func (c *console) event(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live {
		fmt.Fprint(c.w, "\r"+strings.Repeat(" ", statusWidth)+"\r")
		c.live = false
	}
	fmt.Fprintf(c.w, format+"\n", args...)
}

// status redraws the live line.
func (c *console) status(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprint(c.w, "\r"+statusLine(s))
	c.live = true
}

// warnLog keeps the instance's last warnings: the demo's terminal is for
// the demo, but a switch that rolls back should say what kmirror saw.
type warnLog struct {
	mu   sync.Mutex
	kept []string
}

// keptWarnings bounds warnLog: a long run must not grow without end.
const keptWarnings = 40

// Write takes one log line (slog's handlers write each record in one call).
func (w *warnLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kept = append(w.kept, strings.TrimRight(string(p), "\n"))
	if len(w.kept) > keptWarnings {
		w.kept = w.kept[len(w.kept)-keptWarnings:]
	}
	return len(p), nil
}

func (w *warnLog) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.kept...)
}
