package instance

import (
	"context"
	"log/slog"
	"time"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/enforcement"
)

// readOnlyFollower keeps the guard's read-only set in step with the mirror state: the view's
// mirror topics and those of mirrors whose state was lost (coordinator/stateloss.go). The
// first set is installed only once the view has read __mirror_state to its end: until then
// the guard holds enforcement.Loading and refuses every write. A set built from a view still
// being read lacks the mirrors of the partitions not yet read, and let client writes into
// their topics through a restarting instance (the 1,000-fault soak, seed 2).
type readOnlyFollower struct {
	guard    *enforcement.Guard
	view     stateView
	caughtUp func(context.Context) error
	lost     func() map[string]string // topic -> mirror of mirrors whose state was lost
	log      *slog.Logger
	retry    time.Duration // how often catching up is asked about
}

func (f *readOnlyFollower) run(ctx context.Context) {
	began := time.Now()
	for {
		err := f.caughtUp(ctx)
		if err == nil {
			break
		}
		f.log.Debug("writes wait: the mirror state is not read to its end yet", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(f.retry):
		}
	}
	f.log.Info("mirror state read: writes to topics that are not read-only mirror topics pass", "took", time.Since(began).Round(time.Millisecond))
	for {
		changed := f.view.Changed()
		var set *enforcement.ReadOnlySet
		f.view.Read(func(v *statetopic.View) { set = enforcement.FromView(v) })
		f.guard.Update(set.WithLost(f.lost()))
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}
