package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// CaughtUp reports nil once this instance's view of the state topic holds everything written
// to it before the call (or there is no state topic yet), else why not. The read-only set is
// built only from a view that is caught up: a partly read view may miss a mirror whose topics
// must be read-only.
func (c *Coordinator) CaughtUp(ctx context.Context) error {
	behind, exists, err := c.store.behind(ctx)
	switch {
	case err != nil:
		return err
	case exists && behind != "":
		return fmt.Errorf("catching up with %s: %s", c.cfg.StateTopic, behind)
	}
	return nil
}

// Ready reports nil when this instance may take client traffic behind a load balancer (the
// proxy's /ready, docs/deploy.md): it has joined the coordinator group and its view of the
// state topic holds everything written to it before the call. Otherwise the error says which
// is missing. Before the first CreateMirror there is no state topic: nothing to join or read,
// so an instance is ready (the group cannot form without the topic it consumes).
func (c *Coordinator) Ready(ctx context.Context) error {
	behind, exists, err := c.store.behind(ctx)
	switch {
	case err != nil:
		return err
	case !exists:
		return nil
	case !c.joined.Load():
		return fmt.Errorf("not yet a member of the coordinator group %s", c.cfg.GroupID)
	case behind != "":
		return fmt.Errorf("catching up with %s: %s", c.cfg.StateTopic, behind)
	}
	return nil
}

// lost is OnPartitionsLost: the instance is out of the group (its session expired or it
// left) until the next assignment, and every state partition it held is gone.
func (c *Coordinator) lost(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	c.joined.Store(false)
	c.revoked(ctx, cl, m)
}

// behind compares the view's position with the state topic's end offsets: it names the
// first partition not yet read to its end ("" when none), and reports whether the topic
// exists.
func (s *Store) behind(ctx context.Context) (string, bool, error) {
	ends, err := s.admin.ListEndOffsets(ctx, s.topic)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("end offsets of %s: %w", s.topic, err)
	}
	var behind string
	exists := true
	ends.Each(func(o kadm.ListedOffset) {
		switch {
		case errors.Is(o.Err, kerr.UnknownTopicOrPartition):
			exists = false
		case o.Err != nil && err == nil:
			err = fmt.Errorf("end offset of %s partition %d: %w", s.topic, o.Partition, o.Err)
		}
		s.mu.RLock()
		at := s.pos[o.Partition]
		s.mu.RUnlock()
		if o.Err == nil && at < o.Offset && behind == "" {
			behind = fmt.Sprintf("partition %d read to offset %d of %d", o.Partition, at, o.Offset)
		}
	})
	return behind, exists, err
}
