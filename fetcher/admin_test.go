package fetcher

import (
	"fmt"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The per-partition lookups of partitions that start together share requests
// (listOffsetsBatcher, describeProducersBatcher): each caller must still get its
// own partition's answer, also when two ask for the same partition at once.
func TestConcurrentLookupsGetTheirOwnPartition(t *testing.T) {
	e := newEnv(t, sharedPair(t))
	const topic, parts = "concurrent-lookups", 12
	e.createSource(topic, parts, nil)
	for p := range int32(parts) {
		e.produce(topic, p, int(3*(p+1)), 2, kgo.NoCompression(), "lookup")
	}
	if err := deleteRecords(e.ctx, e.src, topic, 5, 4); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*parts)
	for p := range int32(parts) {
		wantEnd, wantStart := int64(3*(p+1)), int64(0)
		if p == 5 {
			wantStart = 4
		}
		check := func(ts, want int64) {
			defer wg.Done()
			got, err := listOffset(e.ctx, e.src, topic, p, ts)
			if err == nil && got != want {
				err = fmt.Errorf("ListOffsets(%d, %d) = %d, want %d", p, ts, got, want)
			}
			if err != nil {
				errs <- err
			}
		}
		wg.Add(4)
		go check(-1, wantEnd)
		go check(-1, wantEnd) // the same partition twice in one batch
		go check(-2, wantStart)
		go func() {
			defer wg.Done()
			prods, err := destinationProducers(e.ctx, e.src, topic, p)
			if err == nil && (len(prods) != 1 || prods[0].LastSequence != int32(3*(p+1)-1)) {
				err = fmt.Errorf("DescribeProducers(%d) = %+v, want one producer with last sequence %d", p, prods, 3*(p+1)-1)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
