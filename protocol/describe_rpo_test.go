package protocol

import (
	"errors"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fullDescribeResponse is the round-trip case DescribeMirrorsResponse/full,
// which carries every tagged field a v0 client never heard of.
func fullDescribeResponse(t *testing.T) *DescribeMirrorsResponse {
	t.Helper()
	for _, c := range roundTripCases() {
		if c.name == "DescribeMirrorsResponse/full" {
			return c.msg.(*DescribeMirrorsResponse)
		}
	}
	t.Fatal("no DescribeMirrorsResponse/full case")
	return nil
}

// decodeAsV0Client decodes resp's encoding as a client built for the first
// v0 would (testdata/describe_v0), and fails the test if it cannot.
func decodeAsV0Client(t *testing.T, resp *DescribeMirrorsResponse) []V0DescribeMirror {
	t.Helper()
	d := decoder{r: kbin.Reader{Src: resp.AppendTo(nil)}}
	d.int32()          // ThrottleMillis
	d.int16()          // ErrorCode
	d.nullableString() // ErrorMessage
	old := readArray[V0DescribeMirror](&d)
	var tags kmsg.Tags
	d.tags(&tags, nil)
	if err := d.finish(); err != nil {
		t.Fatalf("a v0 client cannot decode the response: %v", err)
	}
	return old
}

func TestDescribeMirrorsRecoveryPointIsTagged(t *testing.T) {
	full := fullDescribeResponse(t)
	if ps := full.Mirrors[0].Topics[0].Partitions; len(ps) < 3 || ps[0].RecordsAtRisk <= 0 || ps[1].RecordsAtRisk != -1 || ps[2].RecordsAtRisk != 0 {
		t.Fatal("the full DescribeMirrorsResponse case lost its recovery point fields (at risk, unknown, caught up)")
	}
	old := decodeAsV0Client(t, full)
	want := full.Mirrors[0].Topics[0].Partitions
	got := old[0].Topics[0].Partitions
	if len(got) != len(want) {
		t.Fatalf("a v0 client reads %d partitions, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if g.Partition != w.Partition || g.State != w.State || g.SourceHighWatermark != w.SourceHighWatermark ||
			g.DestinationHighWatermark != w.DestinationHighWatermark || g.Lag != w.Lag || g.LastMirroredOffset != w.LastMirroredOffset ||
			g.RetryAttempt != w.RetryAttempt || !reflect.DeepEqual(g.ErrorMessage, w.ErrorMessage) {
			t.Errorf("partition %d: a v0 client reads %+v, want the fields of %+v", i, g, w)
		}
		seen := map[uint32][]byte{}
		g.UnknownTags.Each(func(tag uint32, v []byte) { seen[tag] = v })
		// Written exactly when known: 0 (caught up) is said, -1 is left out.
		_, has0 := seen[0]
		_, has1 := seen[1]
		if has0 != (w.RecordsAtRisk != -1) || has1 != (w.AtRiskAgeMs != -1) {
			t.Errorf("partition %d (records %d, age %d): a v0 client sees tags %v", i, w.RecordsAtRisk, w.AtRiskAgeMs, seen)
		}
		if has0 {
			if r := (kbin.Reader{Src: seen[0]}); r.Int64() != w.RecordsAtRisk {
				t.Errorf("partition %d: tag 0 holds %x, want int64 %d", i, seen[0], w.RecordsAtRisk)
			}
		}
	}
	if _, ok := func() ([]byte, bool) {
		var v []byte
		var ok bool
		got[1].UnknownTags.Each(func(tag uint32, b []byte) {
			if tag == 5 {
				v, ok = b, true
			}
		})
		return v, ok
	}(); !ok {
		t.Error("an unknown partition tag (5) did not survive next to the recovery point tags")
	}
}

// A server from before the recovery point fields sends none: the client
// must read "unknown" (-1), never "nothing at risk" (0).
func TestDescribeMirrorsRecoveryPointAbsentIsUnknown(t *testing.T) {
	oldServer := V0DescribeMirror{Name: "dr", Topics: []V0DescribeTopic{{Name: "orders", Partitions: []V0DescribePartition{
		{Partition: 0, State: "MIRRORING", SourceHighWatermark: 100, DestinationHighWatermark: 90, Lag: 10, LastMirroredOffset: -1},
	}}}}
	body := appendNullableString(kbin.AppendInt16(kbin.AppendInt32(nil, 0), 0), nil) // throttle, error code, message
	body = appendArray(body, []V0DescribeMirror{oldServer})
	body = appendTags(body, &kmsg.Tags{})
	var resp DescribeMirrorsResponse
	if err := resp.ReadFrom(body); err != nil {
		t.Fatalf("decoding an old server's response: %v", err)
	}
	p := resp.Mirrors[0].Topics[0].Partitions[0]
	if p.RecordsAtRisk != -1 || p.AtRiskAgeMs != -1 {
		t.Fatalf("an old server's partition reads records %d, age %d at risk; want -1, -1 (unknown)", p.RecordsAtRisk, p.AtRiskAgeMs)
	}
	if r := resp.Mirrors[0].AtRisk(); r.Unknown != 1 || r.Partitions != 1 {
		t.Fatalf("totals over an old server's partition: %+v, want it counted as unknown", r)
	}
}

func TestDescribeMirrorsRecoveryPointTagMustBeInt64(t *testing.T) {
	// appendTags drops unknown tags that reuse a known number, so the
	// hostile bytes are built by hand: a partition without tags, then one
	// tag 0 holding four bytes where an int64 belongs.
	enc := (&V0DescribePartition{State: "MIRRORING", SourceHighWatermark: -1, DestinationHighWatermark: -1, Lag: -1, LastMirroredOffset: -1}).appendTo(nil)
	enc = append(enc[:len(enc)-1], 1, 0, 4, 0, 0, 0, 7)
	d := decoder{r: kbin.Reader{Src: enc}}
	var got DescribeMirrorsResponsePartition
	got.readFrom(&d)
	if err := d.finish(); !errors.Is(err, ErrMalformedMessage) {
		t.Fatalf("a 4-byte RecordsAtRisk tag decoded: %v, %+v", err, got)
	}
}

func TestAtRiskTotals(t *testing.T) {
	m := DescribeMirrorsResponseMirror{Name: "dr", Topics: []DescribeMirrorsResponseTopic{
		{Name: "orders", Partitions: []DescribeMirrorsResponsePartition{
			{State: "MIRRORING", RecordsAtRisk: 7, AtRiskAgeMs: 3000},
			{State: "PAUSED", RecordsAtRisk: 5, AtRiskAgeMs: 9000},
			{State: "MIRRORING", RecordsAtRisk: 0, AtRiskAgeMs: 0},
			{State: "STOPPED", RecordsAtRisk: -1, AtRiskAgeMs: -1}, // failed over: not counted
		}},
		{Name: "payments", Partitions: []DescribeMirrorsResponsePartition{
			{State: "FAILED", RecordsAtRisk: -1, AtRiskAgeMs: -1},   // source unreachable
			{State: "MIRRORING", RecordsAtRisk: 2, AtRiskAgeMs: -1}, // timestamp not read
		}},
	}}
	if got, want := m.Topics[0].AtRisk(), (AtRisk{Records: 12, AgeMs: 9000, Partitions: 3, Behind: 2, FailedOver: 1}); got != want {
		t.Errorf("orders: %+v, want %+v", got, want)
	}
	if got, want := m.AtRisk(), (AtRisk{Records: 14, AgeMs: 9000, Partitions: 5, Behind: 3, Unknown: 2, FailedOver: 1}); got != want {
		t.Errorf("mirror: %+v, want %+v", got, want)
	}
}
