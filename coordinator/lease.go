package coordinator

// The ownership lease. An instance owns its mirror partitions through its
// membership of the coordinators' consumer group; the group coordinator
// hands a partition to another instance only after this one left or missed
// heartbeats for a whole session timeout. So a heartbeat that the group
// coordinator answered as from a current member, sent at time t, means no
// other instance owns this instance's partitions before t + session timeout.
// The data path asks Lease before every write and holds it back from
// t + session timeout / 2 on: an instance frozen (SIGSTOP, a VM pause, a
// long GC) or cut off from the group coordinator stops writing before
// anyone could have taken over. The heartbeats here are this package's own,
// next to kgo's, because kgo does not tell when one succeeded.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Lease reports whether this instance may write to the destination for the
// partitions it owns: nil while its group membership was confirmed within
// half a session timeout.
func (c *Coordinator) Lease() error {
	until := time.Duration(c.leaseUntil.Load())
	if now := time.Since(c.leaseBase); now >= until {
		if until == 0 {
			return errors.New("ownership lease: group membership not confirmed yet")
		}
		return fmt.Errorf("ownership lease: group membership last confirmed %v ago (more than half the %v session timeout): another instance may own the partitions",
			(now - until + c.cfg.SessionTimeout/2).Round(time.Millisecond), c.cfg.SessionTimeout)
	}
	return nil
}

// runLease keeps the lease renewed while the group answers this member.
func (c *Coordinator) runLease(ctx context.Context) {
	every := c.cfg.SessionTimeout / 6
	for {
		wait := every
		if err := c.renewLease(ctx); err != nil {
			wait = min(every, 200*time.Millisecond)
			c.log.Debug("ownership lease not renewed", "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-c.leaseNow:
			t.Stop()
		}
	}
}

func (c *Coordinator) renewLease(ctx context.Context) error {
	member, generation := c.group.GroupMetadata()
	if member == "" || generation < 0 {
		return errors.New("not a group member yet")
	}
	sent := time.Since(c.leaseBase)
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.Generation, req.MemberID = c.cfg.GroupID, generation, member
	hctx, cancel := context.WithTimeout(ctx, c.cfg.SessionTimeout/2)
	defer cancel()
	resp, err := req.RequestWith(hctx, c.group)
	if err != nil {
		return err
	}
	// REBALANCE_IN_PROGRESS: still a member; partitions are revoked (and
	// their workers stopped) before anyone else is given them.
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil && !errors.Is(err, kerr.RebalanceInProgress) {
		return err
	}
	c.leaseUntil.Store(int64(sent + c.cfg.SessionTimeout/2))
	return nil
}
