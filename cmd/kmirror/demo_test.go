package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/protocol"
)

// The demo's live line fits an 80-column terminal with large counts, and
// after --delete it says so instead of an empty partitions list.
func TestDemoStatusLine(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var parts []protocol.DescribeMirrorsResponsePartition
	for i, st := range []string{"MIRRORING", "MIRRORING", "PAUSED", "STOPPING"} {
		parts = append(parts, protocol.DescribeMirrorsResponsePartition{Partition: int32(i), State: st,
			SourceHighWatermark: 123456789, DestinationHighWatermark: 123456000, Lag: 789})
	}
	busy := &protocol.DescribeMirrorsResponse{Mirrors: []protocol.DescribeMirrorsResponseMirror{{Name: "demo",
		Topics: []protocol.DescribeMirrorsResponseTopic{{Name: "demo", Partitions: parts}}}}}
	msg := "no mirror named demo"
	deleted := &protocol.DescribeMirrorsResponse{Mirrors: []protocol.DescribeMirrorsResponseMirror{{Name: "demo",
		ErrorCode: protocol.ErrUnknownMirror.Code, ErrorMessage: &msg}}}
	for _, c := range []struct {
		resp *protocol.DescribeMirrorsResponse
		want string
	}{
		{busy, "03:04:05  source 493827156, destination 493824000, lag 3156; 2 MIRRORING, 1 PAUSED, 1 STOPPING"},
		{deleted, "03:04:05  mirror demo: UNKNOWN_MIRROR"},
		{&protocol.DescribeMirrorsResponse{Mirrors: []protocol.DescribeMirrorsResponseMirror{{Name: "demo"}}}, "03:04:05  source 0, destination 0, lag 0; no partitions"},
	} {
		line := statusLine(formatStatus(now, c.resp))
		if len([]rune(line)) > 79 {
			t.Errorf("status line is %d columns: %q", len([]rune(line)), line)
		}
		if !strings.HasPrefix(line, c.want[:min(len(c.want), 78)]) {
			t.Errorf("status line %q, want %q", line, c.want)
		}
		if strings.Contains(line, "partitions:") {
			t.Errorf("status line has an empty partitions list: %q", line)
		}
	}
}
