package fetcher

import (
	"testing"
	"time"
)

// TestResponseBytes: unset, the response size is the copy buffer shared by the Fetches in
// flight, so that they can fill it together, within fetch.max.bytes and 50 MiB.
func TestResponseBytes(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		fetch    int32
		buffer   int64
		inFlight int
		want     int32
	}{
		{mib, 128 * mib, 8, 16 * mib},  // the defaults: 128 MiB in flight, not 80
		{mib, 512 * mib, 8, 50 * mib},  // a WAN's buffer: capped, under the broker's 55 MiB
		{mib, 1024 * mib, 8, 50 * mib}, // more wants more Fetches in flight
		{mib, 4 * mib, 8, mib},         // never below fetch.max.bytes
		{2 * mib, 128 * mib, 0, 50 * mib},
	} {
		if got := ResponseBytes(tc.fetch, tc.buffer, tc.inFlight); got != tc.want {
			t.Errorf("fetch %d, buffer %d, %d in flight: response %d, want %d", tc.fetch, tc.buffer, tc.inFlight, got, tc.want)
		}
	}
	if got := (Config{}).withDefaults().FetchResponseMaxBytes; got != 16*mib {
		t.Errorf("default response size %d, want 16 MiB", got)
	}
	if got := (Config{MaxBufferedBytes: 512 * mib, FetchesInFlight: 4}).withDefaults().FetchResponseMaxBytes; got != 50*mib {
		t.Errorf("response size for a 512 MiB buffer over 4 Fetches %d, want 50 MiB", got)
	}
	if got := (Config{FetchResponseMaxBytes: 10 * mib}).withDefaults().FetchResponseMaxBytes; got != 10*mib {
		t.Errorf("a set response size became %d", got)
	}
}

// TestPartitionFetchBytes: a partition alone on its leader fetches a large share of the
// response limit, the partitions one of the Fetches in flight takes share its response, many
// partitions fetch fetch.max.bytes each, and the share never passes an eighth of the copy
// buffer, nor drops below fetch.max.bytes.
func TestPartitionFetchBytes(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		fetch, resp int32
		buffer      int64
		n, inFlight int
		want        int32
	}{
		{mib, 10 * mib, 64 * mib, 1, 1, 8 * mib},   // an eighth of the buffer
		{mib, 10 * mib, 256 * mib, 1, 1, 10 * mib}, // the whole response
		{mib, 10 * mib, 64 * mib, 5, 1, 2 * mib},   // an equal share of one Fetch
		{mib, 10 * mib, 64 * mib, 64, 1, mib},      // fetch.max.bytes
		{2 * mib, 10 * mib, 64 * mib, 64, 1, 2 * mib},
		{mib, 10 * mib, 4 * mib, 1, 1, mib}, // a small buffer keeps fetch.max.bytes
		{mib, 10 * mib, 64 * mib, 0, 1, 8 * mib},
		// Spread over the Fetches in flight: each takes n/inFlight partitions and
		// fills its response.
		{mib, 10 * mib, 128 * mib, 64, 8, 10 * mib / 8},
		{mib, 10 * mib, 128 * mib, 16, 8, 5 * mib}, // was 1 MiB: 16 MiB per round trip in flight
		{mib, 10 * mib, 128 * mib, 5, 8, 10 * mib}, // one partition per Fetch: the response
		{mib, 10 * mib, 128 * mib, 4000, 8, mib},   // thousands: fetch.max.bytes still
		{mib, 10 * mib, 128 * mib, 64, 0, mib},     // 0 in flight counts as 1
	} {
		c := &Copier{cfg: Config{FetchMaxBytes: tc.fetch, FetchResponseMaxBytes: tc.resp, MaxBufferedBytes: tc.buffer, FetchesInFlight: tc.inFlight}}
		if got := c.partitionFetchBytes(tc.n); got != tc.want {
			t.Errorf("fetch %d, response %d, buffer %d, %d partitions over %d Fetches: %d bytes per partition, want %d", tc.fetch, tc.resp, tc.buffer, tc.n, tc.inFlight, got, tc.want)
		}
		if lim := c.partitionBufferLimit(c.partitionFetchBytes(tc.n)); lim > tc.buffer {
			t.Errorf("buffer %d: a partition may hold %d", tc.buffer, lim)
		}
	}
}

// TestCollectSplitsPartitionsOverFetches: a source's fetches in flight each take a disjoint
// share of the broker's partitions (none is in two outstanding fetches), their reservations
// stay within the copy buffer, and a partition is fetchable again once its answer is in.
func TestCollectSplitsPartitionsOverFetches(t *testing.T) {
	const mib = 1 << 20
	c, s := sourceOfTen(4*mib, 14*mib, 0)
	seen := map[topicPartition]bool{}
	var fetches [][]fetchPart
	for range 4 {
		plan := s.collect()
		fetch, reservation := plan.parts, plan.reservation
		if len(fetch) > 3 {
			t.Fatalf("a fetch took %d of 10 partitions; a share of 4 fetches is 3", len(fetch))
		}
		for _, f := range fetch {
			if seen[f.p.tp] {
				t.Fatalf("%v is in two outstanding fetches", f.p.tp)
			}
			seen[f.p.tp] = true
		}
		if reservation > 0 {
			fetches = append(fetches, fetch)
		}
	}
	if c.reserved > c.cfg.MaxBufferedBytes {
		t.Fatalf("%d bytes reserved, buffer %d", c.reserved, c.cfg.MaxBufferedBytes)
	}
	// 3 MiB per fetch of 3 partitions: the budget of 14 MiB allows 4 fetches.
	if len(fetches) != 4 || len(seen) != 10 {
		t.Fatalf("%d fetches covering %d partitions, want 4 covering 10", len(fetches), len(seen))
	}
	if fetch := s.collect().parts; len(fetch) != 0 {
		t.Fatalf("a fifth fetch took %d partitions already in flight", len(fetch))
	}
	for _, f := range fetches[0] {
		f.p.fetching = false
	}
	c.reserved = 0
	if fetch := s.collect().parts; len(fetch) != len(fetches[0]) {
		t.Fatalf("after an answer, %d partitions fetchable again, want %d", len(fetch), len(fetches[0]))
	}
}

// TestCollectWaitsForAWholeFetch: with a Fetch in flight, a goroutine does not send
// a Fetch of the little budget left (it would hold a slot for a round trip for a
// fraction of a response); with none in flight it sends what fits, so the copy moves.
func TestCollectWaitsForAWholeFetch(t *testing.T) {
	const mib = 1 << 20
	c, s := sourceOfTen(3*mib, 14*mib, 0) // 4 Fetches of 3 partitions, 3 MiB each
	if plan := s.collect(); len(plan.parts) != 3 || plan.reservation != 3*mib {
		t.Fatalf("first Fetch: %d partitions, %d bytes", len(plan.parts), plan.reservation)
	}
	c.reserved = 12 * mib // 2 MiB left: not a whole Fetch of 3 partitions
	if plan := s.collect(); len(plan.parts) != 0 {
		t.Fatalf("with a Fetch in flight and 2 MiB left, a Fetch of %d partitions (%d bytes) went out", len(plan.parts), plan.reservation)
	}
	c.reserved = 11 * mib // 3 MiB: a whole one
	if plan := s.collect(); len(plan.parts) != 3 {
		t.Fatalf("with room for a whole Fetch, %d partitions went", len(plan.parts))
	}
	s.inFlight, s.idlePolls = 1, 1 // an idle poll, held up to idleFetchWait, is no reason to wait
	c.reserved = 12 * mib
	if plan := s.collect(); len(plan.parts) != 2 || plan.reservation != 2*mib {
		t.Fatalf("with only an idle poll in flight, %d partitions and %d bytes went; want what fits, 2 and 2 MiB", len(plan.parts), plan.reservation)
	}
	s.inFlight, s.idlePolls = 0, 0
	for _, p := range c.parts {
		p.fetching = false
	}
	c.reserved = 12 * mib
	if plan := s.collect(); len(plan.parts) != 2 || plan.reservation != 2*mib {
		t.Fatalf("with nothing in flight, %d partitions and %d bytes went; want what fits, 2 and 2 MiB", len(plan.parts), plan.reservation)
	}
}

// TestNoReadAheadUnderASourceQuota: a lone partition whose cursor is in flight
// is read ahead, unless the broker throttled a Fetch lately: under a source
// quota, read-ahead would spend the quota on partial batches sent twice.
func TestNoReadAheadUnderASourceQuota(t *testing.T) {
	const mib = 1 << 20
	c := &Copier{cfg: Config{FetchMaxBytes: mib, FetchResponseMaxBytes: 10 * mib, MaxBufferedBytes: 128 * mib,
		FetchesInFlight: 4, hooks: noHooks{}}, parts: map[topicPartition]*partition{}}
	p := &partition{}
	p.tp, p.srcLeader, p.state = topicPartition{"t", 0}, 1, stateRunning
	p.fetching, p.bytesPerOffset, p.progress.SourceLastStable = true, 512, 1_000_000
	c.parts[p.tp] = p
	s := &source{c: c, id: 1, wake: make(chan struct{}, 1)}

	s.quotaUntil = time.Now().Add(time.Minute)
	if fetch := s.collect().parts; len(fetch) != 0 {
		t.Fatalf("throttled lately, the source fetched %+v; want nothing read ahead", fetch)
	}
	s.quotaUntil = time.Time{}
	fetch := s.collect().parts
	if len(fetch) != 1 || fetch[0].ahead == nil || fetch[0].offset <= 0 {
		t.Fatalf("not throttled, the source fetched %+v; want one Fetch read ahead of the cursor", fetch)
	}
}

// TestOneFetchInFlightUnderASourceQuota: throttled lately, a source keeps one Fetch in flight,
// over all its partitions, and the next waits for its answer: the broker mutes
// only the throttled connection, so Fetches on the others would each bring one more answer
// past the quota. Not throttled, the partitions are shared out over FetchesInFlight again.
func TestOneFetchInFlightUnderASourceQuota(t *testing.T) {
	const mib = 1 << 20
	// Two are caught up: the one Fetch asks for them too, or their next
	// records would wait for every backlog to be copied.
	c, s := sourceOfTen(16*mib, 64*mib, 2)
	answer := func(plan fetchPlan) {
		for _, f := range plan.parts {
			f.p.fetching = false
		}
		c.reserved -= plan.reservation
		s.inFlight--
	}

	s.quotaUntil = time.Now().Add(time.Minute)
	first := s.collect()
	if len(first.parts) != 10 || first.idle {
		t.Fatalf("throttled, the one Fetch took %d of 10 partitions (idle poll: %v); want all, not an idle poll", len(first.parts), first.idle)
	}
	if second := s.collect(); len(second.parts) != 0 {
		t.Fatalf("throttled, a second Fetch went out with %d partitions while one was in flight", len(second.parts))
	}
	answer(first)
	again := s.collect()
	if len(again.parts) != 10 {
		t.Fatalf("throttled, after the answer the next Fetch took %d partitions; want 10", len(again.parts))
	}
	answer(again)

	s.quotaUntil = time.Time{}
	for i := range 4 {
		if plan := s.collect(); len(plan.parts) == 0 || len(plan.parts) > 3 {
			t.Fatalf("not throttled, Fetch %d took %d partitions; want a share of at most 3", i+1, len(plan.parts))
		}
	}
	if s.inFlight != 4 {
		t.Fatalf("%d Fetches counted in flight, want 4", s.inFlight)
	}
}

// sourceOfTen is a copier with 4 Fetches in flight, fetch.max.bytes 1 MiB and the given
// response limit and buffer, whose 10 running partitions source broker 1 leads, the first
// caughtUp of them caught up, and that broker's source.
func sourceOfTen(respMax int32, buffer int64, caughtUp int32) (*Copier, *source) {
	c := &Copier{cfg: Config{FetchMaxBytes: 1 << 20, FetchResponseMaxBytes: respMax, MaxBufferedBytes: buffer,
		FetchesInFlight: 4, hooks: noHooks{}}, parts: map[topicPartition]*partition{}}
	for i := range int32(10) {
		p := &partition{}
		p.tp, p.srcLeader, p.state = topicPartition{"t", i}, 1, stateRunning
		p.atEnd = i < caughtUp
		c.parts[p.tp] = p
	}
	return c, &source{c: c, id: 1, wake: make(chan struct{}, 1)}
}
