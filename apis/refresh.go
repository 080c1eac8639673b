package apis

import (
	"context"
	"time"

	"github.com/kmirror/kmirror/apis/addtopics"
	"github.com/kmirror/kmirror/apis/apicore"
	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// RunRefresh refreshes, every metadata.refresh.interval.ms, each mirror
// whose mirror-level records this instance coordinates, until ctx ends.
func RunRefresh(ctx context.Context, b *apicore.Backend) {
	last := map[string]time.Time{}
	tick := time.NewTicker(time.Second)
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
				mirrors = append(mirrors, due{n, mirrorconfig.Parse(v.Mirror(n).Config.Configs).RefreshInterval})
			}
		})
		now := time.Now()
		for _, m := range mirrors {
			if !b.Coord.OwnsMirror(m.name) || now.Sub(last[m.name]) < m.interval {
				continue
			}
			last[m.name] = now
			rctx, cancel := context.WithTimeout(ctx, apicore.Timeout)
			if _, err := addtopics.Refresh(rctx, b, m.name); err != nil && ctx.Err() == nil {
				b.Log.Warn("refreshing mirror from its source", "mirror", m.name, "err", err)
			}
			cancel()
		}
	}
}
