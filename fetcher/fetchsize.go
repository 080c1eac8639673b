package fetcher

// How much and how fast a source fetches: the fetch size of a partition, the
// bytes it may hold before its next Fetch, and the copy's rate limit
// (SetRateLimit), charged per answer.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxDerivedResponseBytes caps the response size derived from the copy buffer
// (ResponseBytes): the Java consumer's default fetch.max.bytes, under the broker's
// own default cap on a Fetch response (its fetch.max.bytes, 55 MiB), past which a
// reservation would hold budget that no answer fills. A buffer larger than
// fetch.max.in.flight × 50 MiB wants more Fetches in flight, not larger ones.
const maxDerivedResponseBytes = 50 << 20

// ResponseBytes is the Fetch response size when fetch.response.max.bytes is not set:
// the copy buffer shared by the Fetches in flight, so that together they may fill it,
// never below fetch.max.bytes nor above maxDerivedResponseBytes. A fixed 10 MiB
// response left 48 of the default 128 MiB out of flight with 8 Fetches, and raising
// copy.buffer.max.bytes alone moved nothing more per round trip. A copy with a
// backlog keeps the budget full either way; what then bounds it across a long link
// is in docs/DESIGN.md, "Fetches in flight".
func ResponseBytes(fetchMax int32, buffer int64, inFlight int) int32 {
	return int32(max(int64(fetchMax), min(buffer/int64(max(inFlight, 1)), maxDerivedResponseBytes)))
}

// PartitionFetchBytes is the fetch size of each of n partitions fetched from one leader
// over inFlight Fetches at once, for a copy with the given fetch.max.bytes,
// fetch.response.max.bytes and copy buffer: fetch.max.bytes, or more when the partitions
// one Fetch takes (n spread over inFlight) are fewer than the response limit has room for.
// Each Fetch costs both brokers and the copier a fixed amount of work; a lone partition
// fetched 1 MiB at a time spent a source broker 1–7 CPU s per GB copied, 0.2–2.5 at 8 MiB
// (bench/mirror, none/1), and the copy's own CPU fell by a fifth. Across a WAN, a
// partition's fetch size is what it copies per round trip: shared as if one Fetch held
// every partition, 16 partitions fetched 1 MiB each, 16 MiB per round trip over the 8
// Fetches, and copied 96–97 MB/s at 150 ms (0.80 of a 50 MB/s cap); shared per Fetch,
// 5 MiB each and 244–248 MB/s, the cap full (bench/README.md, WAN, 2026-12-07 15:17).
// Capped at an eighth of the copy buffer, so that several fetches of a partition still
// overlap its produces within the memory bound. inFlight 1 is a consumer's one Fetch per
// broker (the benchmark tunes MirrorMaker 2 with it).
func PartitionFetchBytes(fetchMax, responseMax int32, buffer int64, n, inFlight int) int32 {
	perFetch := (max(n, 1) + max(inFlight, 1) - 1) / max(inFlight, 1)
	share := int64(responseMax) / int64(perFetch)
	return int32(max(int64(fetchMax), min(share, buffer/8)))
}

func (c *Copier) partitionFetchBytes(n int) int32 {
	return PartitionFetchBytes(c.cfg.FetchMaxBytes, c.cfg.FetchResponseMaxBytes, c.cfg.MaxBufferedBytes, n, c.cfg.FetchesInFlight)
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
