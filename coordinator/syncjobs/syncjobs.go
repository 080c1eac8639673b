// Package syncjobs runs each mirror's periodic sync jobs on the instance
// that coordinates the mirror's mirror-level records (coordinator.OwnsMirror)
// and records what each achieved in the mirror's MirrorSync record:
//
//   - topics: new source topics matching the patterns, partition growth,
//     and the check that the source is still the cluster the mirror was
//     made for (Mirrors.RefreshTopics: the mirror RPCs' side, apis, since it
//     adds topics the way AddTopicsToMirror does). If it fails, no other job
//     runs: nothing is copied from a cluster that may be the wrong one.
//   - groups: consumer group offsets (coordinator/groupsync).
//   - topic-configs: destination topic configs follow the source's
//     (coordinator/metasync).
//   - acls: only when acls.include is set (coordinator/metasync).
//
// docs/DESIGN.md, "Sync jobs", says what each job does and records.
package syncjobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/sourceclient"
	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// tick is how often Scheduler.Run looks for mirrors that are due; it bounds
// how late a run can start after metadata.refresh.interval.ms.
const tick = 250 * time.Millisecond

// JobTimeout bounds one job of one mirror.
const JobTimeout = 30 * time.Second

// Mirrors is what the jobs need from the mirror RPCs' side (apis.Backend).
type Mirrors interface {
	// Mirror returns a copy of a mirror's state once this instance's view
	// holds every state write made before the call, or an error if the
	// mirror does not exist (any more) or its state cannot be read.
	Mirror(ctx context.Context, name string) (*statetopic.Mirror, error)
	// RefreshTopics is the topics job; it returns the topics it added.
	RefreshTopics(ctx context.Context, mirror string) ([]string, error)
}

// Scheduler runs the sync jobs of the mirrors this instance coordinates.
type Scheduler struct {
	Coord       *coordinator.Coordinator
	Mirrors     Mirrors
	Sources     *sourceclient.Cache
	Destination *kadm.Client // the destination cluster, reached directly
	Log         *slog.Logger
	Now         func() time.Time // nil: the system's clock
}

// Run runs, every metadata.refresh.interval.ms, the sync jobs of each
// mirror whose mirror-level records this instance coordinates, until ctx
// ends. Mirrors run one after the other, each job bounded by JobTimeout.
func (s *Scheduler) Run(ctx context.Context) {
	last := map[string]time.Time{}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		for _, name := range s.due(last, now) {
			if ctx.Err() != nil {
				return
			}
			if !s.Coord.OwnsMirror(name) {
				continue
			}
			last[name] = now
			s.RunOnce(ctx, name)
		}
	}
}

// due lists the mirrors whose interval has passed since their last run.
func (s *Scheduler) due(last map[string]time.Time, now time.Time) []string {
	var out []string
	s.Coord.Store().Read(func(v *statetopic.View) {
		for _, n := range v.MirrorNames() {
			if now.Sub(last[n]) >= mirrorconfig.RefreshInterval(v.Mirror(n).Config.Configs) {
				out = append(out, n)
			}
		}
	})
	return out
}

func (s *Scheduler) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}
