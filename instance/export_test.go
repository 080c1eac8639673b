package instance

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/enforcement"
)

// PrimaryWritten is the Freeze.Written a route's applier installs, asking the primary
// through cl; warm: asked about every partition of these topics at once, as a freeze does.
func PrimaryWritten(ctx context.Context, cl *kgo.Client, warm ...string) func(context.Context, string, int32, enforcement.ProducerBatch) bool {
	p := newPrimaryProducers(ctx, func() (*kgo.Client, error) { return cl, nil }, slog.New(slog.DiscardHandler))
	if len(warm) > 0 {
		p.warm(warm)
	}
	return p.Written
}
