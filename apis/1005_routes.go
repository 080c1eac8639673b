package apis

import (
	"slices"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
	"github.com/kmirror/kmirror/proxy"
)

// routeNames lists the routes this instance serves.
func (b *Backend) routeNames() []string {
	var out []string
	for _, r := range b.routes() {
		out = append(out, r.Name)
	}
	return out
}

func (b *Backend) routes() []proxy.RouteStatus {
	if b.Routes == nil {
		return nil
	}
	return b.Routes()
}

// describeRoutes answers DescribeMirrors' Routes: this instance's routes
// tied to one of mirrors (every route when all is set), each with its last
// switch as the state topic records it and how long it took.
func (b *Backend) describeRoutes(mirrors []string, all bool) []protocol.DescribeMirrorsResponseRoute {
	var out []protocol.DescribeMirrorsResponseRoute
	now := b.now().UnixMilli()
	for _, r := range b.routes() {
		if !all && !slices.Contains(mirrors, r.Mirror) {
			continue
		}
		var rec *statetopic.RouteSwitch
		b.Coord.Store().Read(func(v *statetopic.View) { rec = v.RouteSwitch(r.Name) })
		out = append(out, describeRoute(r, rec, now))
	}
	return out
}

// describeRoute is one route's describe entry; rec is its switch record
// (nil: never switched).
func describeRoute(r proxy.RouteStatus, rec *statetopic.RouteSwitch, nowMs int64) protocol.DescribeMirrorsResponseRoute {
	d := protocol.DescribeMirrorsResponseRoute{Name: r.Name, Mirror: r.Mirror, Bootstrap: r.Bootstrap, Upstream: r.Upstream,
		Open: r.Open, Step: statetopic.RouteIdle.String(), SwitchAgeMs: -1, DurationMs: -1, FreezeMs: -1, RecordsAtRisk: -1}
	if r.ClusterID != "" {
		d.ClusterID = &r.ClusterID
	}
	if rec == nil {
		return d
	}
	d.Attempt, d.Step, d.Forced = rec.Attempt, rec.Step.String(), rec.Forced
	if rec.Driver != "" {
		d.Driver = &rec.Driver
	}
	if rec.Reason != "" {
		d.Reason = &rec.Reason
	}
	if rec.Forced {
		d.RecordsAtRisk = rec.RecordsAtRisk
	}
	t := rec.Timings(nowMs)
	d.DurationMs, d.FreezeMs = t.Total, t.Freeze
	if len(rec.Steps) > 0 {
		d.SwitchAgeMs = max(0, nowMs-rec.Steps[0].AtMs)
	}
	for _, s := range t.Steps {
		d.Steps = append(d.Steps, protocol.DescribeMirrorsResponseRouteStep{Step: s.Step.String(), DurationMs: s.Ms})
	}
	return d
}
