package instance

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/enforcement"
)

// PrimaryWritten is the Freeze.Written a route's applier installs, asking the primary
// through cl; sweep: asked about every partition of these topics, as a freeze does, until ctx
// ends.
func PrimaryWritten(ctx context.Context, cl *kgo.Client, sweep ...string) func(context.Context, string, int32, enforcement.ProducerBatch) bool {
	p := newPrimaryProducers(ctx, func() (*kgo.Client, error) { return cl, nil }, slog.New(slog.DiscardHandler))
	if len(sweep) > 0 {
		p.sweep(sweep)
	}
	return p.Written
}
