package apis

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/apis/addtopics"
	"github.com/kmirror/kmirror/apis/apicore"
	"github.com/kmirror/kmirror/apis/deletemirror"
	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/groupsync"
	"github.com/kmirror/kmirror/coordinator/metasync"
	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// refreshTick is how often RunRefresh looks for mirrors that are due; it
// bounds how late a run can start after metadata.refresh.interval.ms.
const refreshTick = 250 * time.Millisecond

// RunRefresh runs, every metadata.refresh.interval.ms, the sync jobs of each
// mirror whose mirror-level records this instance coordinates, until ctx
// ends. Mirrors run one after the other, each job bounded by
// apicore.Timeout.
func RunRefresh(ctx context.Context, b *apicore.Backend) {
	last := map[string]time.Time{}
	tick := time.NewTicker(refreshTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		type due struct {
			name     string
			interval time.Duration
		}
		var mirrors []due
		b.Coord.Store().Read(func(v *statetopic.View) {
			for _, n := range v.MirrorNames() {
				mirrors = append(mirrors, due{n, mirrorconfig.RefreshInterval(v.Mirror(n).Config.Configs)})
			}
		})
		now := time.Now()
		for _, m := range mirrors {
			if ctx.Err() != nil {
				return
			}
			if !b.Coord.OwnsMirror(m.name) || now.Sub(last[m.name]) < m.interval {
				continue
			}
			last[m.name] = now
			refreshMirror(ctx, b, m.name)
		}
	}
}

// refreshMirror runs a mirror's sync jobs once, in order, and records what
// each did in the mirror's MirrorSync record (and the groups' records):
//
//   - topics: new source topics matching the patterns, partition growth,
//     and the check that the source is still the cluster the mirror was
//     made for. If it fails, no other job runs: nothing is copied from a
//     cluster that may be the wrong one.
//   - groups: consumer group offsets (groupsync).
//   - topic-configs: destination topic configs follow the source's (metasync).
//   - acls: only when acls.include is set (metasync).
func refreshMirror(ctx context.Context, b *apicore.Backend, name string) {
	now := b.NowTime()
	var cfg mirrorconfig.Config
	b.Coord.Store().Read(func(v *statetopic.View) {
		if m := v.Mirror(name); m != nil {
			cfg = mirrorconfig.Parse(m.Config.Configs) // a mirror's configs never change
		}
	})
	jobs := map[string]*statetopic.SyncJob{}
	var recs []coordinator.Record
	run := func(job string, fn func(ctx context.Context) (string, error)) bool {
		jctx, cancel := context.WithTimeout(ctx, apicore.Timeout)
		defer cancel()
		msg, err := fn(jctx)
		j := &statetopic.SyncJob{AttemptedAt: now, Message: msg}
		jobs[job] = j
		if err != nil {
			j.Error = err.Error()
			if ctx.Err() == nil {
				b.Log.Warn("mirror sync job failed", "mirror", name, "job", job, "err", err)
			}
			return false
		}
		j.LastSuccessAt = now
		return true
	}
	if !run(statetopic.JobTopics, func(ctx context.Context) (string, error) {
		added, err := addtopics.Refresh(ctx, b, name)
		if len(added) > 0 {
			return fmt.Sprintf("added %d topics matching the mirror's patterns", len(added)), err
		}
		return "", err
	}) {
		if ctx.Err() == nil {
			for _, job := range []string{statetopic.JobGroups, statetopic.JobTopicConfigs, statetopic.JobACLs} {
				if job != statetopic.JobACLs || len(cfg.ACLsInclude) > 0 {
					jobs[job] = &statetopic.SyncJob{AttemptedAt: now, Error: "not run: the topics job failed, so the source was not checked"}
				}
			}
			record(ctx, b, name, jobs, nil)
		}
		return
	}
	m, err := b.Mirror(ctx, name)
	if err != nil {
		return // deleted meanwhile
	}
	src, err := b.SourceClient(m)
	if err != nil {
		return // cannot happen after the topics job reached the source
	}
	srcAdm := kadm.NewClient(src) // shares the cached client: never closed here

	run(statetopic.JobGroups, func(ctx context.Context) (string, error) {
		res, err := groupsync.Job{Mirror: m, Source: srcAdm, Destination: b.Destination, Groups: cfg.GroupsInclude}.Run(ctx)
		if err != nil {
			return "", err
		}
		changed := groupsync.Records(m, res, now)
		for _, r := range changed {
			if g, ok := r.Value.(*statetopic.GroupSync); ok {
				b.Log.Info("consumer group sync changed state", "mirror", name, "group", r.Key.Group, "state", g.State, "message", g.Message)
			}
		}
		recs = append(recs, changed...)
		return fmt.Sprintf("%d groups tracked, %d partition offsets committed", len(res.Groups), res.Committed), nil
	})
	run(statetopic.JobTopicConfigs, func(ctx context.Context) (string, error) {
		res, err := metasync.SyncTopicConfigs(ctx, srcAdm, b.Destination, groupsync.SyncablePartitions(m).Topics(),
			metasync.ExcludedConfig(cfg.TopicPropertyExcluded))
		return res.String(), err
	})
	if len(cfg.ACLsInclude) > 0 {
		run(statetopic.JobACLs, func(ctx context.Context) (string, error) {
			res, err := metasync.SyncACLs(ctx, srcAdm, b.Destination, cfg.ACLsInclude)
			return res.String(), err
		})
	}
	record(ctx, b, name, jobs, recs)
}

// record writes the run's group records, then the MirrorSync record that
// dates them (same state partition, so in that order). A job keeps its
// last success time across failed runs.
func record(ctx context.Context, b *apicore.Backend, name string, jobs map[string]*statetopic.SyncJob, recs []coordinator.Record) {
	wctx, cancel := context.WithTimeout(ctx, apicore.Timeout)
	defer cancel()
	var prev *statetopic.MirrorSync
	exists := false
	b.Coord.Store().Read(func(v *statetopic.View) {
		if m := v.Mirror(name); m != nil {
			exists, prev = true, m.Sync
		}
	})
	if !exists {
		return
	}
	rec := &statetopic.MirrorSync{Jobs: map[string]*statetopic.SyncJob{}}
	if prev != nil {
		for job, j := range prev.Jobs {
			rec.Jobs[job] = j
		}
	}
	for job, j := range jobs {
		p := prev.Job(job)
		c := *j
		if c.LastSuccessAt.IsZero() && p != nil {
			c.LastSuccessAt = p.LastSuccessAt
		}
		rec.Jobs[job] = &c
	}
	recs = append(recs, coordinator.Record{Key: statetopic.MirrorSyncKey(name), Value: rec})
	if err := b.Coord.Write(wctx, recs...); err != nil {
		if ctx.Err() == nil {
			b.Log.Warn("recording the mirror's sync state", "mirror", name, "err", err)
		}
		return
	}
	// DeleteMirror may have tombstoned the mirror between the check above
	// and the write: a sync record left behind would make the name look
	// taken forever, so remove what was just written.
	var gone *statetopic.Mirror
	b.Coord.Store().Read(func(v *statetopic.View) {
		if v.Mirror(name) == nil {
			gone = v.RawMirror(name).Copy()
		}
	})
	if gone != nil {
		if err := b.Coord.Write(wctx, deletemirror.Tombstones(gone.SyncKeys())...); err != nil {
			b.Log.Warn("removing the sync records of a mirror deleted meanwhile", "mirror", name, "err", err)
		}
	}
}
