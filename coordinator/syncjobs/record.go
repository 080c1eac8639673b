package syncjobs

import (
	"context"
	"maps"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// record writes the run's group records, then the MirrorSync record that
// dates them (same state partition, so in that order).
func (r *run) record(ctx context.Context) {
	wctx, cancel := context.WithTimeout(ctx, JobTimeout)
	defer cancel()
	var prev *statetopic.MirrorSync
	exists := false
	r.s.Coord.Store().Read(func(v *statetopic.View) {
		if m := v.Mirror(r.name); m != nil {
			exists, prev = true, m.Sync
		}
	})
	if !exists {
		return
	}
	recs := append(r.recs, coordinator.Record{Key: statetopic.MirrorSyncKey(r.name), Value: merge(prev, r.jobs)})
	if err := r.s.Coord.Write(wctx, recs...); err != nil {
		if ctx.Err() == nil {
			r.s.Log.Warn("recording the mirror's sync state", "mirror", r.name, "err", err)
		}
		return
	}
	r.undoIfDeleted(wctx)
}

// merge is the MirrorSync record after a run: the previous record's jobs,
// updated by the run's. A job keeps its last success time across failed
// runs.
func merge(prev *statetopic.MirrorSync, jobs map[string]*statetopic.SyncJob) *statetopic.MirrorSync {
	rec := &statetopic.MirrorSync{Jobs: map[string]*statetopic.SyncJob{}}
	if prev != nil {
		maps.Copy(rec.Jobs, prev.Jobs)
	}
	for job, j := range jobs {
		c := *j
		if p := prev.Job(job); c.LastSuccessAt.IsZero() && p != nil {
			c.LastSuccessAt = p.LastSuccessAt
		}
		rec.Jobs[job] = &c
	}
	return rec
}

// undoIfDeleted removes what the run just wrote if DeleteMirror tombstoned
// the mirror meanwhile (between the check in record and the write): a sync
// record left behind would make the name look taken forever.
func (r *run) undoIfDeleted(ctx context.Context) {
	var gone *statetopic.Mirror
	r.s.Coord.Store().Read(func(v *statetopic.View) {
		if v.Mirror(r.name) == nil {
			gone = v.RawMirror(r.name).Copy()
		}
	})
	if gone == nil {
		return
	}
	keys := gone.SyncKeys()
	recs := make([]coordinator.Record, len(keys))
	for i, k := range keys {
		recs[i].Key = k
	}
	if err := r.s.Coord.Write(ctx, recs...); err != nil {
		r.s.Log.Warn("removing the sync records of a mirror deleted meanwhile", "mirror", r.name, "err", err)
	}
}
