package syncjobs

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/coordinatortest"
	"github.com/kmirror/kmirror/coordinator/sourceclient"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestMergeKeepsLastSuccessAcrossFailedRuns(t *testing.T) {
	prev := &statetopic.MirrorSync{Jobs: map[string]*statetopic.SyncJob{
		statetopic.JobTopics: {LastSuccessAt: t0, AttemptedAt: t0},
		statetopic.JobACLs:   {LastSuccessAt: t0, AttemptedAt: t0, Message: "acls"},
	}}
	later := t0.Add(time.Minute)
	got := merge(prev, map[string]*statetopic.SyncJob{
		statetopic.JobTopics: {AttemptedAt: later, Error: "unreachable"},
		statetopic.JobGroups: {AttemptedAt: later, LastSuccessAt: later},
	})
	want := &statetopic.MirrorSync{Jobs: map[string]*statetopic.SyncJob{
		statetopic.JobTopics: {LastSuccessAt: t0, AttemptedAt: later, Error: "unreachable"},
		statetopic.JobGroups: {LastSuccessAt: later, AttemptedAt: later},
		statetopic.JobACLs:   {LastSuccessAt: t0, AttemptedAt: t0, Message: "acls"},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("merged %+v, want %+v", got.Jobs, want.Jobs)
	}
	if prev.Jobs[statetopic.JobTopics].Error != "" {
		t.Fatal("merge changed the previous record")
	}
	if got := merge(nil, map[string]*statetopic.SyncJob{statetopic.JobTopics: {AttemptedAt: later}}); got.Jobs[statetopic.JobTopics].LastSuccessAt != (time.Time{}) {
		t.Fatalf("a first failed run has a last success: %+v", got.Jobs[statetopic.JobTopics])
	}
}

// fakeMirrors serves mirrors from the coordinator's view and fails the
// topics job with err.
type fakeMirrors struct {
	c   *coordinator.Coordinator
	err error
}

func (f *fakeMirrors) Mirror(_ context.Context, name string) (*statetopic.Mirror, error) {
	var m *statetopic.Mirror
	f.c.Store().Read(func(v *statetopic.View) { m = v.Mirror(name).Copy() })
	if m == nil {
		return nil, errors.New("no such mirror")
	}
	return m, nil
}

func (f *fakeMirrors) RefreshTopics(context.Context, string) ([]string, error) { return nil, f.err }

type env struct {
	s   *Scheduler
	ctx context.Context
}

func newEnv(t *testing.T) *env {
	dst := kafkatest.Start(t, kafkatest.Fake())
	c := coordinatortest.Start(t, dst.Bootstrap(), &coordinatortest.DataPath{})
	sources := sourceclient.NewCache()
	t.Cleanup(sources.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if err := c.EnsureStateTopic(ctx); err != nil {
		t.Fatal(err)
	}
	s := &Scheduler{Coord: c, Mirrors: &fakeMirrors{c: c}, Sources: sources, Destination: kadm.NewClient(dst.Client(t)),
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return t0 }}
	return &env{s: s, ctx: ctx}
}

func (e *env) write(t *testing.T, recs ...coordinator.Record) {
	t.Helper()
	if err := e.s.Coord.Write(e.ctx, recs...); err != nil {
		t.Fatal(err)
	}
}

func (e *env) sync(name string) *statetopic.MirrorSync {
	var out *statetopic.MirrorSync
	e.s.Coord.Store().Read(func(v *statetopic.View) {
		if m := v.RawMirror(name); m != nil {
			out = m.Sync
		}
	})
	return out
}

// A failed topics job stops the run: the other jobs are recorded as not
// run (acls only where acls.include asks for them), the record is written,
// and a mirror deleted meanwhile gets no record at all.
func TestRunOnceTopicsJobFailureStopsTheRun(t *testing.T) {
	e := newEnv(t)
	e.s.Mirrors.(*fakeMirrors).err = errors.New("source unreachable")
	e.write(t,
		coordinator.Record{Key: statetopic.MirrorConfigKey("dr"), Value: &statetopic.MirrorConfig{Configs: map[string]string{"bootstrap.servers": "127.0.0.1:1"}}},
		coordinator.Record{Key: statetopic.MirrorConfigKey("acl"), Value: &statetopic.MirrorConfig{Configs: map[string]string{"bootstrap.servers": "127.0.0.1:1", "acls.include": "TOPIC"}}})
	for _, name := range []string{"dr", "acl", "gone"} {
		e.s.RunOnce(e.ctx, name)
	}
	got := e.sync("dr")
	if got == nil {
		t.Fatal("no MirrorSync record written for dr")
	}
	if j := got.Job(statetopic.JobTopics); j == nil || j.Error != "source unreachable" || j.AttemptedAt != t0 || !j.LastSuccessAt.IsZero() {
		t.Fatalf("topics job %+v", j)
	}
	for _, job := range []string{statetopic.JobGroups, statetopic.JobTopicConfigs} {
		if j := got.Job(job); j == nil || j.Error != "not run: the topics job failed, so the source was not checked" {
			t.Fatalf("%s job %+v", job, j)
		}
	}
	if j := got.Job(statetopic.JobACLs); j != nil {
		t.Fatalf("acls job recorded without acls.include: %+v", j)
	}
	if j := e.sync("acl").Job(statetopic.JobACLs); j == nil || j.Error == "" {
		t.Fatalf("acls job of a mirror with acls.include: %+v", j)
	}
	if s := e.sync("gone"); s != nil {
		t.Fatalf("a mirror that does not exist got a sync record: %+v", s)
	}
}

// A mirror deleted while its run writes (only sync records left, no
// config) has what the run wrote removed again.
func TestUndoIfDeletedRemovesLeftoverSyncRecords(t *testing.T) {
	e := newEnv(t)
	e.write(t,
		coordinator.Record{Key: statetopic.MirrorSyncKey("dr"), Value: &statetopic.MirrorSync{Jobs: map[string]*statetopic.SyncJob{}}},
		coordinator.Record{Key: statetopic.GroupSyncKey("dr", "g"), Value: &statetopic.GroupSync{State: statetopic.GroupSynced}})
	r := &run{s: e.s, name: "dr", now: t0}
	r.undoIfDeleted(e.ctx)
	polltest.Eventually(t, 30*time.Second, "dr's sync records removed", func() (bool, string) {
		gone := false
		e.s.Coord.Store().Read(func(v *statetopic.View) { gone = v.RawMirror("dr") == nil })
		return gone, "records left"
	})
}

func TestDueFollowsEachMirrorsInterval(t *testing.T) {
	e := newEnv(t)
	e.write(t,
		coordinator.Record{Key: statetopic.MirrorConfigKey("fast"), Value: &statetopic.MirrorConfig{Configs: map[string]string{"metadata.refresh.interval.ms": "1000"}}},
		coordinator.Record{Key: statetopic.MirrorConfigKey("slow"), Value: &statetopic.MirrorConfig{Configs: map[string]string{"metadata.refresh.interval.ms": "60000"}}})
	last := map[string]time.Time{}
	if got := e.s.due(last, t0); !reflect.DeepEqual(got, []string{"fast", "slow"}) {
		t.Fatalf("first look: due %v, want both", got)
	}
	last["fast"], last["slow"] = t0, t0
	if got := e.s.due(last, t0.Add(999*time.Millisecond)); len(got) != 0 {
		t.Fatalf("before any interval: due %v", got)
	}
	if got := e.s.due(last, t0.Add(time.Second)); !reflect.DeepEqual(got, []string{"fast"}) {
		t.Fatalf("after 1 s: due %v, want [fast]", got)
	}
}
