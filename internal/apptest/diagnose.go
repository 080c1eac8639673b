package apptest

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/fetcher"
)

// ClientLog keeps the last lines a franz-go client logged, for a failure to show what the
// client did (its retries, producer id resets, reconnections) rather than only what the
// checks found. KMIRROR_APPTEST_LOG=debug records franz-go's debug level (every request).
type ClientLog struct {
	name  string
	mu    sync.Mutex
	lines []string
	next  int
}

const clientLogLines = 4000

// NewClientLog is an empty log of the client name.
func NewClientLog(name string) *ClientLog { return &ClientLog{name: name} }

// Opt is the kgo option that logs into l.
func (l *ClientLog) Opt() kgo.Opt {
	level := kgo.LogLevelInfo
	if os.Getenv("KMIRROR_APPTEST_LOG") == "debug" {
		level = kgo.LogLevelDebug
	}
	return kgo.WithLogger(kgo.BasicLogger(l, level, func() string { return time.Now().Format("15:04:05.000 ") }))
}

// Write is io.Writer for kgo.BasicLogger: one call, one line.
func (l *ClientLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := strings.TrimRight(string(p), "\n")
	if len(l.lines) < clientLogLines {
		l.lines = append(l.lines, line)
	} else {
		l.lines[l.next] = line
		l.next = (l.next + 1) % clientLogLines
	}
	return len(p), nil
}

// Dump writes the kept lines, oldest first.
func (l *ClientLog) Dump(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(w, "--- %s's franz-go log (last %d lines) ---\n", l.name, len(l.lines))
	for i := range l.lines {
		fmt.Fprintln(w, l.lines[(l.next+i)%len(l.lines)])
	}
}

// writers describes who wrote the batches of topic/partition on c that hold a value the
// partition holds more than once, with a batch either side: base offset, producer id and
// epoch, base sequence. It tells apart a producer that resent under a new producer id
// (KIP-360's reset, after OUT_OF_ORDER_SEQUENCE_NUMBER), a resend the broker did not
// recognise as one (same id and sequence twice), and a write under an id nobody expected.
func writers(ctx context.Context, c *kgo.Client, topic string, partition int32) (string, error) {
	adm := kadm.NewClient(c)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return "", fmt.Errorf("end offsets: %w", err)
	}
	end, ok := ends.Lookup(topic, partition)
	if !ok || end.Err != nil {
		return "", fmt.Errorf("end offset of %s/%d: %v", topic, partition, end.Err)
	}
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return "", fmt.Errorf("metadata: %w", err)
	}
	pd, ok := md.Topics[topic].Partitions[partition]
	if !ok {
		return "", fmt.Errorf("metadata: no %s/%d", topic, partition)
	}
	values := map[int64]string{}
	count := map[string]int{}
	var batches []fetcher.Batch
	for at := int64(0); at < end.Offset; {
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxWaitMillis, req.MaxBytes, req.IsolationLevel = 11, 100, 8<<20, 0
		p := kmsg.NewFetchRequestTopicPartition()
		p.Partition, p.FetchOffset, p.PartitionMaxBytes, p.LogStartOffset = partition, at, 8<<20, -1
		// kgo sends the highest version both sides support, by name or by id (v13+).
		req.Topics = []kmsg.FetchRequestTopic{{Topic: topic, TopicID: md.Topics[topic].ID, Partitions: []kmsg.FetchRequestTopicPartition{p}}}
		resp, err := c.Broker(int(pd.Leader)).Request(ctx, req)
		if err != nil {
			return "", fmt.Errorf("fetch %s/%d at %d: %w", topic, partition, at, err)
		}
		fr := resp.(*kmsg.FetchResponse)
		if len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 {
			return "", fmt.Errorf("fetch %s/%d at %d: unexpected response shape", topic, partition, at)
		}
		rp := fr.Topics[0].Partitions[0]
		if rp.ErrorCode != 0 {
			return "", fmt.Errorf("fetch %s/%d at %d: error code %d", topic, partition, at, rp.ErrorCode)
		}
		it := fetcher.NewBatchIterator(rp.RecordBatches)
		before := at
		var b fetcher.Batch
		for it.Next(&b) {
			recs, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: topic, Partition: partition, KeepControlRecords: true, Offset: b.BaseOffset},
				&kmsg.FetchResponseTopicPartition{Partition: partition, HighWatermark: end.Offset, LastStableOffset: end.Offset, RecordBatches: b.Raw}, kgo.DefaultDecompressor(), nil)
			for _, r := range recs.Records {
				values[r.Offset] = string(r.Value)
				count[string(r.Value)]++
			}
			b.Raw = nil
			batches = append(batches, b)
			at = b.NextOffset()
		}
		if err := it.Err(); err != nil {
			return "", err
		}
		if at == before {
			return "", fmt.Errorf("fetch %s/%d at %d: no complete batch", topic, partition, at)
		}
	}
	show := map[int]bool{}
	for i, b := range batches {
		for o := b.BaseOffset; o <= b.LastOffset(); o++ {
			if count[values[o]] > 1 {
				show[i-1], show[i], show[i+1] = true, true, true
			}
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s/%d: %d batches, end offset %d; batches holding a value twice, a batch either side:\n", topic, partition, len(batches), end.Offset)
	for i, b := range batches {
		if show[i] {
			fmt.Fprintf(&sb, "  offsets %d-%d producer %d epoch %d sequence %d: %s .. %s\n", b.BaseOffset, b.LastOffset(),
				b.ProducerID, b.ProducerEpoch, b.BaseSequence, values[b.BaseOffset], values[b.LastOffset()])
		}
	}
	return sb.String(), nil
}
