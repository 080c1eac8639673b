package fetcher

// hooks let tests hold a partition's fetching or its destination operations
// at exact points, to create the races they check. A Copier asks them under
// Copier.mu; an implementation must not block or take the Copier's lock.
// Production copiers run with noHooks: Config.hooks is looked at once, in
// NewCopier, not on every fetch or send.
type hooks interface {
	// fetchHeld: the partition is not fetched.
	fetchHeld(tp topicPartition) bool
	// opHeld: the partition's operation at destination offset base is
	// neither sent nor run.
	opHeld(tp topicPartition, base int64) bool
	// warmDecided: an idle fetch goroutine of source broker id decided whether
	// to send an empty Fetch (source.warmable).
	warmDecided(id int32, warm bool)
}

type noHooks struct{}

func (noHooks) fetchHeld(topicPartition) bool     { return false }
func (noHooks) opHeld(topicPartition, int64) bool { return false }
func (noHooks) warmDecided(int32, bool)           {}

// hooksChanged makes the copier look at a partition again after a test
// changed what its hooks hold.
func (c *Copier) hooksChanged(tp topicPartition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wakeAllSrcLocked()
	for _, sk := range c.sinks {
		signal(sk.wake)
	}
	if p := c.parts[tp]; p != nil {
		c.kickLocked(p)
	}
}
