package statuspage

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/protocol"
)

// view is what the template renders: every figure formatted here, so the
// template only lays out.
type view struct {
	Refresh        int // seconds between reloads
	Updated        string
	Stale          string // why the sample is not newer, if it is not
	Collecting     bool   // no sample yet
	Mirrors        []mirrorView
	Partitions     int
	Failed         int
	Lag            int64
	Instances      []instanceView
	InstancesError string
	Routes         []routeView
	Charts         []chart
}

type mirrorView struct {
	Name, Error, Clusters string
	Failed                int
	Topics                []topicView
	Syncs                 []syncView
	Groups                []groupView
}

type topicView struct {
	Name       string
	Partitions []partView
}

// partView is one partition's row. The data-* attributes carry the raw
// numbers (-1 unknown) so a test or a scraper reads them exactly.
type partView struct {
	Partition                               int32
	State, Message                          string
	Lag, SourceHW, DestinationHW, AtRisk    int64
	AtRiskMs                                int64
	LagText, AtRiskText, AtRiskAge, Retries string
	SourceText, DestinationText             string
}

// routeView is one route's row: where it leads, and its last switch.
type routeView struct {
	Name, Mirror, Bootstrap, Upstream, ClusterID string
	Open                                         bool
	Step, Switch, Reason                         string
	Attempt                                      int32
}

type syncView struct{ Job, LastSuccess, LastRun, Error, Message string }

type groupView struct{ Name, State, LastSync, Message string }

type instanceView struct {
	ID, Host        string
	Self            bool
	StatePartitions string
	Mirrors         string
	Owns            []string // "mirror topic: partitions"
	Count           int
}

// newView builds the page from the last sample; since is how old it is.
func newView(st *Status, since time.Duration) view {
	var v view
	for _, m := range st.Mirrors {
		mv := mirrorOf(m, since)
		for _, t := range mv.Topics {
			for _, p := range t.Partitions {
				v.Partitions++
				v.Lag += max(0, p.Lag)
			}
		}
		v.Failed += mv.Failed
		v.Mirrors = append(v.Mirrors, mv)
	}
	for _, in := range st.Instances {
		v.Instances = append(v.Instances, instanceOf(in))
	}
	v.InstancesError = st.InstancesError
	for _, r := range st.Routes {
		v.Routes = append(v.Routes, routeOf(r, since))
	}
	return v
}

func mirrorOf(m protocol.DescribeMirrorsResponseMirror, since time.Duration) mirrorView {
	mv := mirrorView{Name: m.Name, Error: deref(m.ErrorMessage), Clusters: deref(m.Clusters)}
	if mv.Error == "" && m.ErrorCode != 0 {
		mv.Error = fmt.Sprintf("error code %d", m.ErrorCode)
	}
	for _, t := range m.Topics {
		tv := topicView{Name: t.Name}
		for _, p := range t.Partitions {
			if p.State == protocol.MirrorStateFailed.String() {
				mv.Failed++
			}
			tv.Partitions = append(tv.Partitions, partOf(p, since))
		}
		mv.Topics = append(mv.Topics, tv)
	}
	for _, s := range m.Syncs {
		mv.Syncs = append(mv.Syncs, syncView{Job: s.Job, LastSuccess: ago(s.LastSuccessAgeMs, since),
			LastRun: ago(s.LastRunAgeMs, since), Error: deref(s.ErrorMessage), Message: deref(s.Message)})
	}
	for _, g := range m.Groups {
		mv.Groups = append(mv.Groups, groupView{Name: g.Name, State: g.State, LastSync: ago(g.LastSyncAgeMs, since), Message: deref(g.Message)})
	}
	return mv
}

func partOf(p protocol.DescribeMirrorsResponsePartition, since time.Duration) partView {
	pv := partView{Partition: p.Partition, State: p.State, Message: deref(p.ErrorMessage), Lag: p.Lag,
		SourceHW: p.SourceHighWatermark, DestinationHW: p.DestinationHighWatermark, AtRisk: p.RecordsAtRisk, AtRiskMs: p.AtRiskAgeMs,
		LagText: count(p.Lag), AtRiskText: count(p.RecordsAtRisk), AtRiskAge: "–",
		SourceText: count(p.SourceHighWatermark), DestinationText: count(p.DestinationHighWatermark)}
	switch {
	case p.RecordsAtRisk == 0:
		pv.AtRiskAge = "0 s"
	case p.AtRiskAgeMs >= 0:
		pv.AtRiskAge = age(p.AtRiskAgeMs, since)
	}
	if p.RetryAttempt > 0 {
		pv.Retries = strconv.Itoa(int(p.RetryAttempt))
	}
	return pv
}

// routeOf lays out a route's switch: its step, how long it and its write
// freeze took, and the steps' durations.
func routeOf(r protocol.DescribeMirrorsResponseRoute, since time.Duration) routeView {
	rv := routeView{Name: r.Name, Mirror: r.Mirror, Bootstrap: r.Bootstrap, Upstream: r.Upstream, ClusterID: deref(r.ClusterID),
		Open: r.Open, Step: r.Step, Attempt: r.Attempt, Reason: deref(r.Reason)}
	if r.Attempt == 0 {
		rv.Switch = "never switched"
		return rv
	}
	var parts []string
	if r.Forced {
		parts = append(parts, "forced")
	}
	parts = append(parts, "began "+ago(r.SwitchAgeMs, since), "took "+ms(r.DurationMs))
	if r.FreezeMs >= 0 {
		parts = append(parts, "writes frozen "+ms(r.FreezeMs))
	}
	if r.Forced && r.RecordsAtRisk >= 0 {
		parts = append(parts, fmt.Sprintf("%s records at risk when asked", count(r.RecordsAtRisk)))
	}
	var steps []string
	for _, s := range r.Steps {
		steps = append(steps, s.Step+" "+ms(s.DurationMs))
	}
	if len(steps) > 0 {
		parts = append(parts, "steps: "+strings.Join(steps, ", "))
	}
	rv.Switch = strings.Join(parts, "; ")
	return rv
}

// ms formats a describe duration in milliseconds (-1: none).
func ms(d int64) string {
	if d < 0 {
		return "–"
	}
	if d < 10_000 {
		return fmt.Sprintf("%.3f s", float64(d)/1000)
	}
	return duration(time.Duration(d) * time.Millisecond)
}

func instanceOf(m coordinator.Member) instanceView {
	iv := instanceView{ID: m.ID, Host: strings.TrimPrefix(m.Host, "/"), Self: m.Self, Count: len(m.Partitions),
		StatePartitions: ranges(m.StatePartitions), Mirrors: strings.Join(m.Mirrors, ", ")}
	var cur string
	var parts []int32
	flush := func() {
		if cur != "" {
			iv.Owns = append(iv.Owns, cur+": "+ranges(parts))
		}
	}
	for _, p := range m.Partitions {
		if k := p.Mirror + " / " + p.Topic; k != cur {
			flush()
			cur, parts = k, nil
		}
		parts = append(parts, p.Partition)
	}
	flush()
	return iv
}

// ranges writes sorted partitions compactly: 0-3, 7, 9-10.
func ranges(ps []int32) string {
	ps = slices.Sorted(slices.Values(ps))
	var b strings.Builder
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", ps[i], ps[j])
		} else {
			fmt.Fprintf(&b, "%d", ps[i])
		}
		i = j + 1
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// age formats a describe age (ms, -1 never) as of now: the sample is since old.
func age(ms int64, since time.Duration) string {
	if ms < 0 {
		return "never"
	}
	return duration(time.Duration(ms)*time.Millisecond + since)
}

// ago is age for a past event: "12 s ago", or "never".
func ago(ms int64, since time.Duration) string {
	if ms < 0 {
		return "never"
	}
	return age(ms, since) + " ago"
}

func duration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	case int(d.Minutes())%60 == 0:
		return fmt.Sprintf("%d h", int(d.Hours()))
	default:
		return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
	}
}

// count formats a describe count; -1 is unknown.
func count(n int64) string {
	if n < 0 {
		return "unknown"
	}
	return strconv.FormatInt(n, 10)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
