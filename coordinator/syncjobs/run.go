package syncjobs

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/groupsync"
	"github.com/kmirror/kmirror/coordinator/metasync"
	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/internal/plural"
)

// run is one run of one mirror's jobs.
type run struct {
	s    *Scheduler
	name string
	now  time.Time
	jobs map[string]*statetopic.SyncJob // what each job did
	recs []coordinator.Record           // group records the groups job changed
}

// RunOnce runs a mirror's sync jobs once, in order, and records what each
// did in the mirror's MirrorSync record (and the groups' records).
func (s *Scheduler) RunOnce(ctx context.Context, name string) {
	r := &run{s: s, name: name, now: s.now(), jobs: map[string]*statetopic.SyncJob{}}
	var cfg mirrorconfig.Config
	s.Coord.Store().Read(func(v *statetopic.View) {
		if m := v.Mirror(name); m != nil {
			cfg = mirrorconfig.Parse(m.Config.Configs) // a mirror's configs never change
		}
	})
	if !r.job(ctx, statetopic.JobTopics, r.topics) {
		if ctx.Err() == nil {
			r.notRun(cfg)
			r.record(ctx)
		}
		return
	}
	m, err := s.Mirrors.Mirror(ctx, name)
	if err != nil {
		return // deleted meanwhile
	}
	src, err := s.Sources.Client(m.Name, m.Config.Configs)
	if err != nil {
		return // cannot happen after the topics job reached the source
	}
	srcAdm := kadm.NewClient(src) // shares the cached client: never closed here
	r.job(ctx, statetopic.JobGroups, func(ctx context.Context) (string, error) {
		return r.groups(ctx, m, srcAdm, cfg)
	})
	r.job(ctx, statetopic.JobTopicConfigs, func(ctx context.Context) (string, error) {
		res, err := metasync.SyncTopicConfigs(ctx, srcAdm, s.Destination, groupsync.SyncablePartitions(m).Topics(),
			metasync.ExcludedConfig(cfg.TopicPropertyExcluded))
		return res.String(), err
	})
	if len(cfg.ACLsInclude) > 0 {
		r.job(ctx, statetopic.JobACLs, func(ctx context.Context) (string, error) {
			res, err := metasync.SyncACLs(ctx, srcAdm, s.Destination, cfg.ACLsInclude)
			return res.String(), err
		})
	}
	r.record(ctx)
}

// job runs one job, bounded by JobTimeout, and notes what it did; it
// reports whether the job succeeded.
func (r *run) job(ctx context.Context, job string, fn func(ctx context.Context) (string, error)) bool {
	jctx, cancel := context.WithTimeout(ctx, JobTimeout)
	defer cancel()
	msg, err := fn(jctx)
	j := &statetopic.SyncJob{AttemptedAt: r.now, Message: msg}
	r.jobs[job] = j
	if err != nil {
		j.Error = err.Error()
		if ctx.Err() == nil {
			r.s.Log.Warn("mirror sync job failed", "mirror", r.name, "job", job, "err", err)
		}
		return false
	}
	j.LastSuccessAt = r.now
	return true
}

// notRun notes the jobs that do not run because the topics job failed.
func (r *run) notRun(cfg mirrorconfig.Config) {
	for _, job := range []string{statetopic.JobGroups, statetopic.JobTopicConfigs, statetopic.JobACLs} {
		if job != statetopic.JobACLs || len(cfg.ACLsInclude) > 0 {
			r.jobs[job] = &statetopic.SyncJob{AttemptedAt: r.now, Error: "not run: the topics job failed, so the source was not checked"}
		}
	}
}

func (r *run) topics(ctx context.Context) (string, error) {
	added, err := r.s.Mirrors.RefreshTopics(ctx, r.name)
	if len(added) > 0 {
		return fmt.Sprintf("added %s matching the mirror's patterns", plural.Of(len(added), "topic")), err
	}
	return "", err
}

func (r *run) groups(ctx context.Context, m *statetopic.Mirror, srcAdm *kadm.Client, cfg mirrorconfig.Config) (string, error) {
	res, err := groupsync.Job{Mirror: m, Source: srcAdm, Destination: r.s.Destination, Groups: cfg.GroupsInclude}.Run(ctx)
	if err != nil {
		return "", err
	}
	changed := groupsync.Records(m, res, r.now)
	for _, rec := range changed {
		if g, ok := rec.Value.(*statetopic.GroupSync); ok {
			r.s.Log.Info("consumer group sync changed state", "mirror", r.name, "group", rec.Key.Group, "state", g.State, "message", g.Message)
		}
	}
	r.recs = append(r.recs, changed...)
	return fmt.Sprintf("%d groups tracked, %d partition offsets committed", len(res.Groups), res.Committed), nil
}
