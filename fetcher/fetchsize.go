package fetcher

// How much and how fast a source fetches: the fetch size of a partition, the
// bytes it may hold before its next Fetch, and the copy's rate limit
// (SetRateLimit), charged per answer.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// PartitionFetchBytes is the fetch size of each of n partitions fetched from one leader,
// for a copy with the given fetch.max.bytes, fetch.response.max.bytes and copy buffer:
// fetch.max.bytes, or more when fewer partitions share a response than the response limit
// has room for. Each Fetch costs both brokers and the copier a fixed amount of work; a lone
// partition fetched 1 MiB at a time spent a source broker 1–7 CPU s per GB copied, 0.2–2.5
// at 8 MiB (bench/mirror, none/1), and the copy's own CPU fell by a fifth. Capped at an
// eighth of the copy buffer, so that several fetches of a partition still overlap its
// produces within the memory bound.
func PartitionFetchBytes(fetchMax, responseMax int32, buffer int64, n int) int32 {
	share := int64(responseMax) / int64(max(n, 1))
	return int32(max(int64(fetchMax), min(share, buffer/8)))
}

func (c *Copier) partitionFetchBytes(n int) int32 {
	return PartitionFetchBytes(c.cfg.FetchMaxBytes, c.cfg.FetchResponseMaxBytes, c.cfg.MaxBufferedBytes, n)
}

// partitionBufferLimit is how many fetched bytes a partition may hold before its next
// fetch of fetchBytes: a few fetches' worth, so that one partition's fetches overlap its
// produces.
func (c *Copier) partitionBufferLimit(fetchBytes int32) int64 {
	return min(c.cfg.MaxBufferedBytes, 4*int64(fetchBytes))
}

// throttleLocked charges a fetch response's bytes to the rate limit.
func (c *Copier) throttleLocked(resp *kmsg.FetchResponse) {
	r := c.rate.Load()
	if r <= 0 {
		return
	}
	var n int64
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			n += int64(len(p.RecordBatches))
		}
	}
	now := time.Now()
	if c.nextFetch.Before(now) {
		c.nextFetch = now
	}
	c.nextFetch = c.nextFetch.Add(time.Duration(float64(n) / float64(r) * float64(time.Second)))
}

// throttleWaitLocked is how long fetching must wait for the rate limit.
func (c *Copier) throttleWaitLocked() time.Duration {
	if c.rate.Load() <= 0 {
		return 0
	}
	return time.Until(c.nextFetch)
}
