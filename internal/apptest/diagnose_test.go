package apptest

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/kafkatest"
)

// TestWritersShowsWhoWroteAValueTwice: two producers write the same value; writers names
// both batches with their producer ids and leaves out batches far from them.
func TestWritersShowsWhoWroteAValueTwice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := kafkatest.Start(t, kafkatest.Fake())
	c.CreateKeptTopic(t, "t", 1)
	produce := func(cl *kgo.Client, v string) {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	first, second := c.Client(t), c.Client(t)
	for i := range 5 {
		produce(first, fmt.Sprintf("v%d", i))
	}
	produce(second, "v4")
	produce(first, "v5")
	produce(first, "v6")
	got, err := writers(ctx, c.Client(t), "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	lines := regexp.MustCompile(`offsets (\d+)-\d+ producer (\d+) epoch \d+ sequence (\d+): (\S+)`).FindAllStringSubmatch(got, -1)
	var shown []string
	pids := map[string]bool{}
	for _, l := range lines {
		shown = append(shown, l[1]+":"+l[4])
		pids[l[2]] = true
	}
	if strings.Join(shown, " ") != "3:v3 4:v4 5:v4 6:v5" || len(pids) != 2 {
		t.Errorf("writers shows %v from %d producers, want offsets 3-6 (the two v4 and a batch either side) from 2:\n%s", shown, len(pids), got)
	}
}

// TestClientLogKeepsTheLastLines: the ring keeps the newest clientLogLines lines in order.
func TestClientLogKeepsTheLastLines(t *testing.T) {
	l := NewClientLog("x")
	for i := range clientLogLines + 3 {
		fmt.Fprintf(l, "line %d\n", i)
	}
	var sb strings.Builder
	l.Dump(&sb)
	got := strings.Split(strings.TrimSpace(sb.String()), "\n")
	if len(got) != clientLogLines+1 || got[1] != "line 3" || got[len(got)-1] != fmt.Sprintf("line %d", clientLogLines+2) {
		t.Errorf("dump: %d lines, first %q, last %q", len(got), got[1], got[len(got)-1])
	}
}
