package fetcher

import "sync"

// holds is the tests' hooks: partitions whose fetching or producing is held,
// and offsets from which a partition's operations are held.
type holds struct {
	mu             sync.Mutex
	fetch, produce map[topicPartition]bool
	from           map[topicPartition]int64
	warm, cold     int // idle goroutines' decisions to send an empty Fetch, or not
}

func newHolds() *holds {
	return &holds{fetch: map[topicPartition]bool{}, produce: map[topicPartition]bool{}, from: map[topicPartition]int64{}}
}

func (h *holds) fetchHeld(tp topicPartition) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fetch[tp]
}

func (h *holds) warmDecided(_ int32, warm bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if warm {
		h.warm++
	} else {
		h.cold++
	}
}

// warmDecisions are the idle goroutines' decisions so far: to send an empty
// Fetch, and not to.
func (c *Copier) warmDecisions() (warm, cold int) {
	h := c.cfg.hooks.(*holds)
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.warm, h.cold
}

func (h *holds) opHeld(tp topicPartition, base int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.produce[tp] {
		return true
	}
	from, ok := h.from[tp]
	return ok && base >= from
}

// hold pauses (or resumes) fetching and producing of a partition: tests use it
// to create the races they check.
func (c *Copier) hold(topic string, partition int32, fetch, produce bool) {
	h, tp := c.cfg.hooks.(*holds), topicPartition{topic, partition}
	h.mu.Lock()
	h.fetch[tp], h.produce[tp] = fetch, produce
	h.mu.Unlock()
	c.hooksChanged(tp)
}

// holdOpsFrom holds a partition's operations at and after a destination
// offset (from < 0 releases them): tests stop a copy at an exact point.
func (c *Copier) holdOpsFrom(topic string, partition int32, from int64) {
	h, tp := c.cfg.hooks.(*holds), topicPartition{topic, partition}
	h.mu.Lock()
	if from < 0 {
		delete(h.from, tp)
	} else {
		h.from[tp] = from
	}
	h.mu.Unlock()
	c.hooksChanged(tp)
}
