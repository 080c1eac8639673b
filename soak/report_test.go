package soak

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// report is one run's result: the line `make soak` prints and the JSON file.
type report struct {
	Seed          uint64         `json:"seed"`
	Mode          string         `json:"mode"`
	Started       time.Time      `json:"started"`
	DurationS     float64        `json:"duration_s"`
	Faults        int            `json:"faults"`
	FaultsByKind  map[string]int `json:"faults_by_kind"`
	FaultErrors   map[string]int `json:"fault_errors_by_kind,omitempty"`
	Counts        counts         `json:"counts"`
	RecoveryP50Ms int64          `json:"recovery_p50_ms"`
	RecoveryP99Ms int64          `json:"recovery_p99_ms"`
	RecoveryMaxMs int64          `json:"recovery_max_ms"`
	Recoveries    int            `json:"recoveries_measured"`
	// Unrecovered: faults after which the destination never reached the
	// source's log ends of that moment (a halted partition never does).
	Unrecovered     int              `json:"recoveries_not_reached"`
	FinalCatchUpMs  int64            `json:"last_fault_to_caught_up_ms"`
	MaxLagRecords   int64            `json:"max_lag_records"`
	PeakRSSMiB      map[string]int64 `json:"peak_rss_mib"`
	PeakThreads     map[string]int64 `json:"peak_threads"`
	Panics          int              `json:"panics"`
	Crashes         int              `json:"unexpected_exits"`
	Acked           int              `json:"records_acknowledged"`
	ProduceFailures int64            `json:"produce_failures"`
	ReadOnlyRefused int64            `json:"read_only_writes_refused"`
	GroupSamples    int64            `json:"group_offset_samples"`
	Failover        *failoverCheck   `json:"failover,omitempty"`
	// ToxiproxyWedged: network fault proxies replaced because Toxiproxy
	// did not answer a toxic change (internal/faultnet's Front).
	ToxiproxyWedged int      `json:"toxiproxy_proxies_replaced"`
	Log             []*fault `json:"fault_log"`
}

func (r *report) tallyFaults(fs []*fault) {
	r.FaultsByKind, r.FaultErrors = map[string]int{}, map[string]int{}
	for _, f := range fs {
		if f.Began.IsZero() {
			continue
		}
		r.Log = append(r.Log, f)
		if f.Err != "" {
			r.FaultErrors[f.Kind]++
			continue
		}
		r.Faults++
		r.FaultsByKind[f.Kind]++
	}
}

// line is the one-line summary.
func (r *report) line() string {
	c := r.Counts
	return fmt.Sprintf("soak seed=%d mode=%s %.0fs faults=%d (%d kinds, %d not applied) records=%d markers=%d "+
		"lost=%d duplicated=%d mismatched=%d out-of-order=%d read-only=%d group=%d failover=%d known-kafka-abort-markers=%d "+
		"known-kafka-halts=%d (not copied after them: %d, aborted tails: %d) "+
		"recovery p50/p99/max=%d/%d/%dms final=%dms max-lag=%d peak-rss-mib=%v panics=%d crashes=%d toxiproxy-replaced=%d",
		r.Seed, r.Mode, r.DurationS, r.Faults, len(r.FaultsByKind), sum(r.FaultErrors), c.RecordsVerified, c.MarkersVerified,
		c.Lost, c.Duplicated, c.Mismatched, c.OutOfOrder, c.ReadOnlyViolations, c.GroupViolations, c.FailoverViolations,
		c.KnownKafkaAbortMarkers, len(c.Halts), c.NotCopiedAfterHalt, c.HaltAbortMarkers, r.RecoveryP50Ms, r.RecoveryP99Ms, r.RecoveryMaxMs, r.FinalCatchUpMs, r.MaxLagRecords,
		r.PeakRSSMiB, r.Panics, r.Crashes, r.ToxiproxyWedged)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func (r *report) write(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// faultLog is the fault log as text, for a failing run's output.
func (r *report) faultLog() string {
	var b strings.Builder
	for _, f := range r.Log {
		fmt.Fprintf(&b, "%s  +%s  %s", f.Began.UTC().Format("15:04:05.000"), f.Ended.Sub(f.Began).Round(time.Millisecond), f)
		if f.Err != "" {
			fmt.Fprintf(&b, "  ERROR %s", f.Err)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// missingKinds are the kinds no fault of the run was applied for.
func (r *report) missingKinds() []string {
	var out []string
	for _, k := range kinds {
		if r.FaultsByKind[k.name] == 0 {
			out = append(out, k.name)
		}
	}
	return out
}
