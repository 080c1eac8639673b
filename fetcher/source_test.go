package fetcher

import "testing"

// TestPartitionFetchBytes: a partition alone on its leader fetches a large share of the
// response limit, many partitions fetch fetch.max.bytes each, and the share never passes an
// eighth of the copy buffer, nor drops below fetch.max.bytes.
func TestPartitionFetchBytes(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		fetch, resp int32
		buffer      int64
		n           int
		want        int32
	}{
		{mib, 10 * mib, 64 * mib, 1, 8 * mib},   // an eighth of the buffer
		{mib, 10 * mib, 256 * mib, 1, 10 * mib}, // the whole response
		{mib, 10 * mib, 64 * mib, 5, 2 * mib},   // an equal share
		{mib, 10 * mib, 64 * mib, 64, mib},      // fetch.max.bytes
		{2 * mib, 10 * mib, 64 * mib, 64, 2 * mib},
		{mib, 10 * mib, 4 * mib, 1, mib}, // a small buffer keeps fetch.max.bytes
		{mib, 10 * mib, 64 * mib, 0, 8 * mib},
	} {
		c := &Copier{cfg: Config{FetchMaxBytes: tc.fetch, FetchResponseMaxBytes: tc.resp, MaxBufferedBytes: tc.buffer}}
		if got := c.partitionFetchBytes(tc.n); got != tc.want {
			t.Errorf("fetch %d, response %d, buffer %d, %d partitions: %d bytes per partition, want %d", tc.fetch, tc.resp, tc.buffer, tc.n, got, tc.want)
		}
		if lim := c.partitionBufferLimit(c.partitionFetchBytes(tc.n)); lim > tc.buffer {
			t.Errorf("buffer %d: a partition may hold %d", tc.buffer, lim)
		}
	}
}
