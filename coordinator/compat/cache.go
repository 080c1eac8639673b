package compat

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// DefaultTTL is how long a mirror's verdict is reused. Releases and transaction.version
// change by an operator's upgrade, not from one request to the next; a minute keeps
// DescribeMirrors (which a dashboard may poll every second) from sending ApiVersions to
// every broker of both clusters on each call, and shows an upgrade within a minute.
const DefaultTTL = time.Minute

// ProbeError is a cluster that did not answer ApiVersions: the check could not be made
// (retriable), as opposed to a pair Check refuses.
type ProbeError struct {
	Side string // "source" or "destination"
	Err  error
}

func (e *ProbeError) Error() string { return e.Side + " cluster: " + e.Err.Error() }
func (e *ProbeError) Unwrap() error { return e.Err }

// Cache keeps each mirror's verdict for TTL. Only a pair Check accepts is kept: a probe
// that failed or a pair refused is asked again on the next call, so an operator's fix is
// seen at once. The zero Cache is ready (DefaultTTL, the system clock).
type Cache struct {
	TTL time.Duration
	Now func() time.Time

	mu       sync.Mutex
	verdicts map[string]verdict
}

type verdict struct {
	pair Pair
	at   time.Time
}

// Pair is mirror's verdict: the cached one while younger than TTL unless fresh, else
// what probing both clusters (src is the mirror's source) and Check say now.
func (c *Cache) Pair(ctx context.Context, mirror string, fresh bool, src, dst *kadm.Client) (Pair, error) {
	now := c.now()
	c.mu.Lock()
	v, ok := c.verdicts[mirror]
	c.mu.Unlock()
	if ok && !fresh && now.Sub(v.at) < c.ttl() {
		return v.pair, nil
	}
	p, err := CheckClusters(ctx, src, dst)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		delete(c.verdicts, mirror)
		return Pair{}, err
	}
	if c.verdicts == nil {
		c.verdicts = map[string]verdict{}
	}
	c.verdicts[mirror] = verdict{pair: p, at: now}
	return p, nil
}

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Cache) ttl() time.Duration {
	if c.TTL > 0 {
		return c.TTL
	}
	return DefaultTTL
}
