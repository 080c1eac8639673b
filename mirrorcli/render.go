package mirrorcli

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// DescribeColumns are the columns of `--describe`; FailedColumns those of
// `--describe --failed`.
var (
	DescribeColumns = []string{"MIRROR", "TOPIC", "PARTITION", "STATE", "SOURCE-OFFSET", "DESTINATION-OFFSET", "LAG", "LMO",
		"AT-RISK-RECORDS", "AT-RISK-SECONDS", "MESSAGE"}
	FailedColumns = []string{"MIRROR", "TOPIC", "PARTITION", "STATE", "SOURCE-OFFSET", "DESTINATION-OFFSET", "LAG", "LMO",
		"AT-RISK-RECORDS", "AT-RISK-SECONDS", "RETRY-ATTEMPT", "MESSAGE"}
)

// seconds prints an age in milliseconds as seconds; -1 (unknown or not
// applicable) prints as -.
func seconds(ms int64) string {
	if ms < 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(ms)/1000, 'f', 1, 64)
}

// millis prints a switch's duration in seconds to the millisecond (the
// steps of a switch on one site take milliseconds); -1 prints as -.
func millis(ms int64) string {
	if ms < 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64) + "s"
}

// offset prints an offset or lag; negative values (-1 = unknown) print as -.
func offset(o int64) string {
	if o < 0 {
		return "-"
	}
	return strconv.FormatInt(o, 10)
}

// retryAttempt prints a FAILED partition's retry attempt; -1 means kmirror
// gave up and waits for the operator.
func retryAttempt(n int16) string {
	if n < 0 {
		return "none (needs operator)"
	}
	return strconv.Itoa(int(n))
}

// oneLine keeps a server message on one table row.
func oneLine(s *string) string {
	if s == nil {
		return ""
	}
	return strings.Join(strings.Fields(*s), " ")
}

func isFailed(p *protocol.DescribeMirrorsResponsePartition) bool {
	return p.State == protocol.MirrorStateFailed.String()
}

// MirrorErrors returns the per-mirror errors of a describe response, as
// "mirror M: NAME: message".
func MirrorErrors(resp *protocol.DescribeMirrorsResponse) []string {
	var out []string
	for _, m := range resp.Mirrors {
		if err := protocol.ResponseError(m.ErrorCode, m.ErrorMessage); err != nil {
			out = append(out, fmt.Sprintf("mirror %s: %v", m.Name, err))
		}
	}
	return out
}

// RenderDescribeTable writes the describe table. Mirrors that failed are
// left out (MirrorErrors reports them); a mirror without topics gets one row
// saying so. failedOnly keeps FAILED partitions and adds RETRY-ATTEMPT.
func RenderDescribeTable(w io.Writer, resp *protocol.DescribeMirrorsResponse, failedOnly bool) error {
	if err := renderPartitions(w, resp, failedOnly); err != nil {
		return err
	}
	if !failedOnly {
		if err := renderRecoveryPoint(w, resp); err != nil {
			return err
		}
	}
	if err := renderSyncTables(w, resp, failedOnly); err != nil {
		return err
	}
	if err := renderRoutes(w, resp, failedOnly); err != nil {
		return err
	}
	if failedOnly {
		return nil
	}
	return renderClusters(w, resp)
}

// RouteColumns are the columns of the routes table of `--describe`.
var RouteColumns = []string{"ROUTE", "MIRROR", "BOOTSTRAP", "LEADS-TO", "SWITCH", "ATTEMPT", "TOOK", "WRITES-FROZEN", "AT-RISK-RECORDS", "STEPS", "MESSAGE"}

// renderRoutes writes the answering instance's routes and their last switch
// (docs/cutover.md); failedOnly keeps the switches that rolled back and the
// routes not open.
func renderRoutes(w io.Writer, resp *protocol.DescribeMirrorsResponse, failedOnly bool) error {
	tw := newTable(w)
	tw.row(RouteColumns...)
	n := 0
	for i := range resp.Routes {
		r := &resp.Routes[i]
		if failedOnly && r.Open && r.Step != statetopic.RouteRolledBack.String() {
			continue
		}
		attempt, took, frozen, risk := "-", millis(r.DurationMs), millis(r.FreezeMs), "-"
		if r.Attempt > 0 {
			attempt = strconv.Itoa(int(r.Attempt))
		}
		if r.Forced {
			risk = offset(r.RecordsAtRisk)
		}
		var steps []string
		for _, s := range r.Steps {
			steps = append(steps, s.Step+"="+millis(s.DurationMs))
		}
		msg := oneLine(r.Reason)
		if !r.Open {
			msg = strings.TrimSpace("closed: this instance has not yet applied the route's switch state. " + msg)
		}
		sw := r.Step
		if r.Forced {
			sw += " (forced)"
		}
		tw.row(r.Name, r.Mirror, r.Bootstrap, r.Upstream, sw, attempt, took, frozen, risk, cmp.Or(strings.Join(steps, ","), "-"), msg)
		n++
	}
	if n == 0 {
		return nil
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return err
	}
	return tw.flush()
}

// renderClusters writes each mirror's source and destination releases and mode
// (docs/versions.md).
func renderClusters(w io.Writer, resp *protocol.DescribeMirrorsResponse) error {
	for _, m := range resp.Mirrors {
		if m.ErrorCode == 0 && m.Clusters != nil {
			if _, err := fmt.Fprintf(w, "\nmirror %s: %s\n", m.Name, oneLine(m.Clusters)); err != nil {
				return err
			}
		}
	}
	return nil
}

// renderPartitions writes the partition table of RenderDescribeTable.
func renderPartitions(w io.Writer, resp *protocol.DescribeMirrorsResponse, failedOnly bool) error {
	tw := newTable(w)
	cols := DescribeColumns
	if failedOnly {
		cols = FailedColumns
	}
	tw.row(cols...)
	for _, m := range resp.Mirrors {
		if m.ErrorCode != 0 {
			continue
		}
		if len(m.Topics) == 0 && !failedOnly {
			tw.row(m.Name, "-", "-", "-", "-", "-", "-", "-", "-", "-", "no topics; add some with --add --mirror "+m.Name+" --topics ...")
			continue
		}
		for _, t := range m.Topics {
			for i := range t.Partitions {
				p := &t.Partitions[i]
				if failedOnly && !isFailed(p) {
					continue
				}
				row := []string{m.Name, t.Name, strconv.Itoa(int(p.Partition)), p.State,
					offset(p.SourceHighWatermark), offset(p.DestinationHighWatermark), offset(p.Lag), offset(p.LastMirroredOffset),
					offset(p.RecordsAtRisk), seconds(p.AtRiskAgeMs)}
				if failedOnly {
					row = append(row, retryAttempt(p.RetryAttempt))
				}
				row = append(row, oneLine(p.ErrorMessage))
				tw.row(row...)
			}
		}
	}
	return tw.flush()
}

// RecoveryPointColumns are the columns of the recovery point summary of
// `--describe`: per topic and per mirror, what a failover right now would
// lose; per consumer group, how old its synced offsets are.
var RecoveryPointColumns = []string{"MIRROR", "RECOVERY-POINT-OF", "AT-RISK-RECORDS", "AT-RISK-SECONDS", "DETAIL"}

// riskDetail says how complete a total is.
func riskDetail(r protocol.AtRisk) string {
	if r.Partitions == 0 {
		return "failed over: every partition is STOPPING or STOPPED"
	}
	d := fmt.Sprintf("%d of %s behind", r.Behind, plural(r.Partitions, "partition"))
	if r.Behind == 0 && r.Unknown == 0 {
		d = "in sync: nothing at risk"
	}
	if r.FailedOver > 0 {
		d += fmt.Sprintf("; %d more failed over (not counted)", r.FailedOver)
	}
	switch {
	case r.Unknown == r.Partitions:
		d = "unknown: a cluster did not answer, or the proxy predates this report"
		if r.FailedOver > 0 {
			d += fmt.Sprintf("; %d more failed over (not counted)", r.FailedOver)
		}
	case r.Unknown > 0:
		d += fmt.Sprintf("; %d unknown (a cluster did not answer, or the proxy predates this report): the totals are a lower bound", r.Unknown)
	}
	return d
}

// riskCells prints a total's records and seconds.
func riskCells(r protocol.AtRisk) (string, string) {
	if r.Partitions == 0 || r.Unknown == r.Partitions {
		return "-", "-"
	}
	return offset(r.Records), seconds(r.AgeMs)
}

// renderRecoveryPoint writes the recovery point summary: one row per topic
// and one per mirror with the totals, then one per consumer group with the
// age of its synced offsets (consumers that move to the destination resume
// from offsets that old, so they re-read, never skip).
func renderRecoveryPoint(w io.Writer, resp *protocol.DescribeMirrorsResponse) error {
	tw := newTable(w)
	tw.row(RecoveryPointColumns...)
	n := 0
	for _, m := range resp.Mirrors {
		if m.ErrorCode != 0 || len(m.Topics) == 0 {
			continue
		}
		for i := range m.Topics {
			r := m.Topics[i].AtRisk()
			rec, sec := riskCells(r)
			tw.row(m.Name, "topic "+m.Topics[i].Name, rec, sec, riskDetail(r))
			n++
		}
		r := m.AtRisk()
		rec, sec := riskCells(r)
		tw.row(m.Name, "mirror "+m.Name, rec, sec, riskDetail(r))
		for i := range m.Groups {
			g := &m.Groups[i]
			detail := fmt.Sprintf("offsets synced %s (%s)", age(g.LastSyncAgeMs), g.State)
			if g.LastSyncAgeMs < 0 {
				detail = fmt.Sprintf("offsets never synced (%s)", g.State)
			}
			tw.row(m.Name, "group "+g.Name, "-", seconds(g.LastSyncAgeMs), detail)
		}
	}
	if n == 0 {
		return nil
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return err
	}
	return tw.flush()
}

// SyncColumns are the columns of the sync jobs table of `--describe`,
// GroupColumns those of its consumer groups table.
var (
	SyncColumns  = []string{"MIRROR", "SYNC", "STATE", "LAST-SUCCESS", "LAST-RUN", "MESSAGE"}
	GroupColumns = []string{"MIRROR", "GROUP", "STATE", "LAST-SYNC", "PARTITIONS", "MESSAGE"}
)

// syncState is a sync job's state: FAILED when its last run failed.
func syncState(s *protocol.DescribeMirrorsResponseSync) string {
	if s.ErrorMessage != nil {
		return "FAILED"
	}
	return "OK"
}

// age prints how long ago something happened (milliseconds; -1 = never).
func age(ms int64) string {
	if ms < 0 {
		return "never"
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String() + " ago"
}

// renderSyncTables writes, after the partitions, what the mirrors' sync
// jobs and consumer group offset sync last did (failedOnly: what failed).
// Nothing is written when no mirror has run a sync yet.
func renderSyncTables(w io.Writer, resp *protocol.DescribeMirrorsResponse, failedOnly bool) error {
	syncs, groups := newTable(w), newTable(w)
	syncs.row(SyncColumns...)
	groups.row(GroupColumns...)
	var nSyncs, nGroups int
	for _, m := range resp.Mirrors {
		if m.ErrorCode != 0 {
			continue
		}
		for i := range m.Syncs {
			s := &m.Syncs[i]
			if failedOnly && s.ErrorMessage == nil {
				continue
			}
			msg := oneLine(s.Message)
			if s.ErrorMessage != nil {
				msg = oneLine(s.ErrorMessage)
			}
			syncs.row(m.Name, s.Job, syncState(s), age(s.LastSuccessAgeMs), age(s.LastRunAgeMs), msg)
			nSyncs++
		}
		for i := range m.Groups {
			g := &m.Groups[i]
			if failedOnly && g.State != string(statetopic.GroupFailed) {
				continue
			}
			groups.row(m.Name, g.Name, g.State, age(g.LastSyncAgeMs), strconv.Itoa(int(g.Partitions)), oneLine(g.Message))
			nGroups++
		}
	}
	for _, t := range []struct {
		tw *table
		n  int
	}{{syncs, nSyncs}, {groups, nGroups}} {
		if t.n == 0 {
			continue
		}
		if _, err := io.WriteString(w, "\n"); err != nil {
			return err
		}
		if err := t.tw.flush(); err != nil {
			return err
		}
	}
	return nil
}

// JSON shapes of --describe --json. Offsets are null where unknown.
type (
	DescribeJSON struct {
		Mirrors []MirrorJSON `json:"mirrors"`
		Routes  []RouteJSON  `json:"routes,omitempty"`
	}
	// RouteJSON is one route of the answering instance and its last switch
	// (docs/cutover.md); durations are milliseconds, null where there are
	// none.
	RouteJSON struct {
		Name          string         `json:"name"`
		Mirror        string         `json:"mirror"`
		Bootstrap     string         `json:"bootstrap"`
		Upstream      string         `json:"upstream"`
		Open          bool           `json:"open"`
		ClusterID     string         `json:"cluster_id,omitempty"`
		Attempt       int32          `json:"attempt"`
		Step          string         `json:"step"`
		Forced        bool           `json:"forced"`
		Driver        string         `json:"driver,omitempty"`
		Reason        string         `json:"reason,omitempty"`
		SwitchAgeMs   *int64         `json:"switch_age_ms"`
		DurationMs    *int64         `json:"duration_ms"`
		FreezeMs      *int64         `json:"freeze_ms"`
		RecordsAtRisk *int64         `json:"records_at_risk"`
		Steps         []StepTimeJSON `json:"steps,omitempty"`
	}
	StepTimeJSON struct {
		Step       string `json:"step"`
		DurationMs int64  `json:"duration_ms"`
	}
	MirrorJSON struct {
		Name   string      `json:"name"`
		Error  *ErrorJSON  `json:"error,omitempty"`
		Topics []TopicJSON `json:"topics"`
		AtRisk *AtRiskJSON `json:"at_risk,omitempty"`
		Syncs  []SyncJSON  `json:"syncs"`
		Groups []GroupJSON `json:"groups"`
	}
	// SyncJSON is one sync job; ages are milliseconds, null for never.
	SyncJSON struct {
		Job              string `json:"job"`
		State            string `json:"state"`
		LastSuccessAgeMs *int64 `json:"last_success_age_ms"`
		LastRunAgeMs     *int64 `json:"last_run_age_ms"`
		Error            string `json:"error,omitempty"`
		Message          string `json:"message,omitempty"`
	}
	// GroupJSON is one consumer group whose offsets the mirror syncs.
	GroupJSON struct {
		Group         string `json:"group"`
		State         string `json:"state"`
		LastSyncAgeMs *int64 `json:"last_sync_age_ms"`
		Partitions    int32  `json:"partitions"`
		Message       string `json:"message,omitempty"`
	}
	ErrorJSON struct {
		Code    int16  `json:"code"`
		Name    string `json:"name"`
		Message string `json:"message"`
	}
	TopicJSON struct {
		Name       string          `json:"name"`
		Partitions []PartitionJSON `json:"partitions"`
		AtRisk     AtRiskJSON      `json:"at_risk"`
	}
	// AtRiskJSON totals what a failover right now would lose over the
	// partitions not yet failed over (all of them, also with --failed).
	// Partitions whose figures are unknown make the totals a lower bound.
	AtRiskJSON struct {
		Records           int64   `json:"records_at_risk"`
		Seconds           float64 `json:"seconds_at_risk"`
		Partitions        int     `json:"partitions"`
		PartitionsBehind  int     `json:"partitions_behind"`
		PartitionsUnknown int     `json:"partitions_unknown"`
		// Not counted: STOPPING or STOPPED.
		PartitionsFailedOver int `json:"partitions_failed_over"`
	}
	PartitionJSON struct {
		Partition                int32  `json:"partition"`
		State                    string `json:"state"`
		SourceHighWatermark      *int64 `json:"source_high_watermark"`
		DestinationHighWatermark *int64 `json:"destination_high_watermark"`
		Lag                      *int64 `json:"lag"`
		LastMirroredOffset       *int64 `json:"last_mirrored_offset"`
		RetryAttempt             int16  `json:"retry_attempt"`
		// Null where unknown or already failing over (STOPPING, STOPPED).
		RecordsAtRisk *int64   `json:"records_at_risk"`
		SecondsAtRisk *float64 `json:"seconds_at_risk"`
		Message       string   `json:"message,omitempty"`
	}
)

func atRiskJSON(r protocol.AtRisk) AtRiskJSON {
	return AtRiskJSON{Records: r.Records, Seconds: float64(r.AgeMs) / 1000, Partitions: r.Partitions,
		PartitionsBehind: r.Behind, PartitionsUnknown: r.Unknown, PartitionsFailedOver: r.FailedOver}
}

func knownSeconds(ms int64) *float64 {
	if ms < 0 {
		return nil
	}
	s := float64(ms) / 1000
	return &s
}

func known(o int64) *int64 {
	if o < 0 {
		return nil
	}
	return &o
}

func errorJSON(code int16, msg *string) *ErrorJSON {
	e := protocol.ErrorForCode(code)
	if e == nil {
		return nil
	}
	if msg != nil && *msg != "" {
		e.Message = *msg
	}
	return &ErrorJSON{Code: e.Code, Name: e.Name, Message: e.Message}
}

// DescribeToJSON converts a describe response (failedOnly: FAILED
// partitions only; topics left without partitions are dropped).
func DescribeToJSON(resp *protocol.DescribeMirrorsResponse, failedOnly bool) DescribeJSON {
	out := DescribeJSON{Mirrors: []MirrorJSON{}}
	for _, m := range resp.Mirrors {
		mj := MirrorJSON{Name: m.Name, Error: errorJSON(m.ErrorCode, m.ErrorMessage), Topics: []TopicJSON{}, Syncs: []SyncJSON{}, Groups: []GroupJSON{}}
		for i := range m.Syncs {
			s := &m.Syncs[i]
			if failedOnly && s.ErrorMessage == nil {
				continue
			}
			mj.Syncs = append(mj.Syncs, SyncJSON{Job: s.Job, State: syncState(s), LastSuccessAgeMs: known(s.LastSuccessAgeMs),
				LastRunAgeMs: known(s.LastRunAgeMs), Error: oneLine(s.ErrorMessage), Message: oneLine(s.Message)})
		}
		for i := range m.Groups {
			g := &m.Groups[i]
			if failedOnly && g.State != string(statetopic.GroupFailed) {
				continue
			}
			mj.Groups = append(mj.Groups, GroupJSON{Group: g.Name, State: g.State, LastSyncAgeMs: known(g.LastSyncAgeMs),
				Partitions: g.Partitions, Message: oneLine(g.Message)})
		}
		if m.ErrorCode == 0 {
			r := atRiskJSON(m.AtRisk())
			mj.AtRisk = &r
		}
		for _, t := range m.Topics {
			tj := TopicJSON{Name: t.Name, Partitions: []PartitionJSON{}, AtRisk: atRiskJSON(t.AtRisk())}
			for i := range t.Partitions {
				p := &t.Partitions[i]
				if failedOnly && !isFailed(p) {
					continue
				}
				tj.Partitions = append(tj.Partitions, PartitionJSON{
					Partition: p.Partition, State: p.State,
					SourceHighWatermark: known(p.SourceHighWatermark), DestinationHighWatermark: known(p.DestinationHighWatermark),
					Lag: known(p.Lag), LastMirroredOffset: known(p.LastMirroredOffset),
					RetryAttempt: p.RetryAttempt, RecordsAtRisk: known(p.RecordsAtRisk), SecondsAtRisk: knownSeconds(p.AtRiskAgeMs),
					Message: oneLine(p.ErrorMessage),
				})
			}
			if failedOnly && len(tj.Partitions) == 0 {
				continue
			}
			mj.Topics = append(mj.Topics, tj)
		}
		out.Mirrors = append(out.Mirrors, mj)
	}
	for _, r := range resp.Routes {
		if failedOnly && r.Open && r.Step != statetopic.RouteRolledBack.String() {
			continue
		}
		rj := RouteJSON{Name: r.Name, Mirror: r.Mirror, Bootstrap: r.Bootstrap, Upstream: r.Upstream, Open: r.Open,
			ClusterID: oneLine(r.ClusterID), Attempt: r.Attempt, Step: r.Step, Forced: r.Forced, Driver: oneLine(r.Driver),
			Reason: oneLine(r.Reason), SwitchAgeMs: known(r.SwitchAgeMs), DurationMs: known(r.DurationMs), FreezeMs: known(r.FreezeMs),
			RecordsAtRisk: known(r.RecordsAtRisk)}
		for _, s := range r.Steps {
			rj.Steps = append(rj.Steps, StepTimeJSON{s.Step, s.DurationMs})
		}
		out.Routes = append(out.Routes, rj)
	}
	return out
}

// RenderDescribeJSON writes DescribeToJSON, indented.
func RenderDescribeJSON(w io.Writer, resp *protocol.DescribeMirrorsResponse, failedOnly bool) error {
	return writeJSON(w, DescribeToJSON(resp, failedOnly))
}

// table is a tabwriter whose rows lose the padding an empty last cell
// leaves behind.
type table struct {
	w   io.Writer
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

func newTable(w io.Writer) *table {
	t := &table{w: w}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 4, 2, ' ', 0)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	lines := strings.SplitAfter(t.buf.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \n")
		if strings.HasSuffix(l, "\n") {
			lines[i] += "\n"
		}
	}
	_, err := io.WriteString(t.w, strings.Join(lines, ""))
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ListColumns are the columns of --list.
var ListColumns = []string{"MIRROR", "SOURCE-BOOTSTRAP", "SOURCE-CLUSTER-ID", "TOPICS"}

// RenderListTable writes the --list table.
func RenderListTable(w io.Writer, resp *protocol.ListMirrorsResponse) error {
	tw := newTable(w)
	tw.row(ListColumns...)
	for _, m := range resp.Mirrors {
		id := m.SourceClusterID
		if id == "" {
			id = "-"
		}
		tw.row(m.Name, m.SourceBootstrap, id, strconv.Itoa(int(m.TopicCount)))
	}
	return tw.flush()
}

// ListJSON is --list --json.
type (
	ListJSON struct {
		Mirrors []ListMirrorJSON `json:"mirrors"`
	}
	ListMirrorJSON struct {
		Name            string   `json:"name"`
		SourceBootstrap string   `json:"source_bootstrap"`
		SourceClusterID string   `json:"source_cluster_id"`
		TopicCount      int32    `json:"topic_count"`
		Topics          []string `json:"topics"`
	}
)

// RenderListJSON writes --list --json.
func RenderListJSON(w io.Writer, resp *protocol.ListMirrorsResponse) error {
	out := ListJSON{Mirrors: []ListMirrorJSON{}}
	for _, m := range resp.Mirrors {
		topics := append([]string{}, m.TopicNames...)
		out.Mirrors = append(out.Mirrors, ListMirrorJSON{Name: m.Name, SourceBootstrap: m.SourceBootstrap,
			SourceClusterID: m.SourceClusterID, TopicCount: m.TopicCount, Topics: topics})
	}
	return writeJSON(w, out)
}
