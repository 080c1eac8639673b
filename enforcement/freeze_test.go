package enforcement

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func frozen(commits bool) *Freeze {
	return &Freeze{Topics: map[string]bool{"orders": true}, Commits: commits}
}

// A frozen topic's partitions are answered NOT_LEADER_OR_FOLLOWER (retriable); the rest of
// the same request is forwarded.
func TestFreezeSplitsProduce(t *testing.T) {
	body := produceBody(9, map[string][]int32{"orders": {0, 1}, "other": {2}})
	d, err := frozen(false).Produce(context.Background(), 9, body)
	if err != nil {
		t.Fatal(err)
	}
	if d.Refused == nil || len(d.Refused.Topics) != 1 || d.Refused.Topics[0].Topic != "orders" || len(d.Refused.Topics[0].Partitions) != 2 {
		t.Fatalf("refused %+v, want orders' two partitions", d.Refused)
	}
	for _, p := range d.Refused.Topics[0].Partitions {
		if p.ErrorCode != kerr.NotLeaderForPartition.Code || !kerr.IsRetriable(kerr.ErrorForCode(p.ErrorCode)) {
			t.Errorf("partition %d: error %d, want the retriable NOT_LEADER_OR_FOLLOWER", p.Partition, p.ErrorCode)
		}
	}
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	if err := req.ReadFrom(d.Forward); err != nil || len(req.Topics) != 1 || req.Topics[0].Topic != "other" {
		t.Fatalf("forwarded %+v (%v), want other only", req.Topics, err)
	}
	if d, err := (&Freeze{}).Produce(context.Background(), 9, body); err != nil || d.Refused != nil {
		t.Fatalf("an empty freeze refused %+v (%v)", d.Refused, err)
	}
	if d, err := frozen(false).Produce(context.Background(), 13, produceBody(13, map[string][]int32{"orders": {0}})); err == nil {
		t.Fatalf("a Produce naming topics by id was decided (%+v); routes cap Produce at v12 and must say so", d)
	}
}

func TestFreezeCommits(t *testing.T) {
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Group = "g"
	oc.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "orders", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0}, {Partition: 3}}}}
	ocBody, _ := encode(oc, 8)
	tc := kmsg.NewPtrTxnOffsetCommitRequest()
	tc.Group = "g"
	tc.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: "orders", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 1}}}}
	tcBody, _ := encode(tc, 3)
	other := kmsg.NewPtrOffsetCommitRequest()
	other.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "other", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0}}}}
	otherBody, _ := encode(other, 8)

	if resp, err := frozen(false).Commit(8, 8, ocBody); err != nil || resp != nil {
		t.Fatalf("commits refused before they are frozen: %v %v", resp, err)
	}
	resp, err := frozen(true).Commit(8, 8, ocBody)
	if err != nil {
		t.Fatal(err)
	}
	r := resp.(*kmsg.OffsetCommitResponse)
	if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 2 {
		t.Fatalf("OffsetCommit answer %+v, want both partitions", r)
	}
	for _, p := range r.Topics[0].Partitions {
		if p.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
			t.Errorf("partition %d: error %d, want COORDINATOR_LOAD_IN_PROGRESS", p.Partition, p.ErrorCode)
		}
	}
	resp, err = frozen(true).Commit(28, 3, tcBody)
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0]; p.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Errorf("TxnOffsetCommit: error %d", p.ErrorCode)
	}
	if resp, err := frozen(true).Commit(8, 8, otherBody); err != nil || resp != nil {
		t.Fatalf("a commit of an unfrozen topic was refused: %v %v", resp, err)
	}
	if _, err := frozen(true).Commit(8, 8, []byte{1, 2}); err == nil {
		t.Fatal("a malformed OffsetCommit was not refused with an error")
	}
}

// FuzzFreeze: any Produce or commit body gets a decision or an error, never a panic, and a
// forwarded Produce body decodes.
func FuzzFreeze(f *testing.F) {
	f.Add(int16(0), int16(9), produceBody(9, map[string][]int32{"orders": {0, 1}, "x": {2}}))
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "orders", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0}}}}
	b, _ := encode(oc, 8)
	f.Add(int16(8), int16(8), b)
	held := kmsg.NewPtrProduceRequest()
	held.SetVersion(9)
	held.Topics = []kmsg.ProduceRequestTopic{{Topic: "orders", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: idempotentBatch(7, 2, 100, 5)}}}}
	f.Add(int16(0), int16(9), held.AppendTo(nil))
	fr := frozen(true)
	fr.Written = func(_ context.Context, _ string, _ int32, b ProducerBatch) bool {
		if b.ProducerID < 0 || b.Epoch < 0 || b.FirstSeq < 0 || b.LastSeq < b.FirstSeq {
			panic(fmt.Sprintf("Written asked about %+v, which is no idempotent producer's batch", b))
		}
		return b.FirstSeq%2 == 0
	}
	f.Fuzz(func(t *testing.T, key, version int16, body []byte) {
		switch key {
		case 0:
			if version < 0 || version > 12 {
				return
			}
			d, err := fr.Produce(context.Background(), version, body)
			if err != nil || d.Forward == nil || d.Refused == nil {
				return
			}
			req := kmsg.NewPtrProduceRequest()
			req.SetVersion(version)
			if err := req.ReadFrom(d.Forward); err != nil {
				t.Fatalf("re-encoded forward body does not decode: %v", err)
			}
		case 8, 28:
			if version < 0 || version > kmsg.RequestForKey(key).MaxVersion() {
				return
			}
			_, _ = fr.Commit(key, version, body)
		}
	})
}

// idempotentBatch is a v2 batch header (no records: the freeze reads the header only) of
// producer pid, epoch, with count records from sequence seq.
func idempotentBatch(pid int64, epoch int16, seq, count int32) []byte {
	b := make([]byte, batchHeaderLen)
	binary.BigEndian.PutUint32(b[batchLengthAt:], uint32(len(b)-12))
	b[batchMagicAt] = 2
	binary.BigEndian.PutUint64(b[batchProducerAt:], uint64(pid))
	binary.BigEndian.PutUint16(b[batchEpochAt:], uint16(epoch))
	binary.BigEndian.PutUint32(b[batchSeqAt:], uint32(seq))
	binary.BigEndian.PutUint32(b[batchCountAt:], uint32(count))
	return b
}

// A frozen Produce whose batch the primary holds (a client resending a write whose answer it
// lost) is forwarded for the primary to answer from its cache; any other batch of the frozen
// topic is refused: a later sequence, another epoch, a batch of no idempotent producer, a
// record set that is not one batch, or when Written cannot tell.
func TestFreezeForwardsABatchThePrimaryHolds(t *testing.T) {
	var asked []ProducerBatch
	f := frozen(false)
	f.Written = func(_ context.Context, topic string, partition int32, b ProducerBatch) bool {
		asked = append(asked, b)
		return topic == "orders" && partition == 0 && b.ProducerID == 7 && b.Epoch == 2 && b.LastSeq <= 104
	}
	held := idempotentBatch(7, 2, 100, 5)
	for _, c := range []struct {
		name    string
		records []byte
		forward bool
	}{
		{"the primary holds it", held, true},
		{"a later sequence", idempotentBatch(7, 2, 103, 5), false},
		{"another epoch", idempotentBatch(7, 3, 100, 5), false},
		{"no producer id", idempotentBatch(-1, -1, -1, 5), false},
		{"two batches", append(append([]byte{}, held...), held...), false},
		{"sequences that wrap", idempotentBatch(7, 2, 1<<31-2, 5), false},
		{"not a batch", []byte("batch"), false},
	} {
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(9)
		req.Acks = -1
		req.Topics = []kmsg.ProduceRequestTopic{{Topic: "orders", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: c.records}}}}
		d, err := f.Produce(context.Background(), 9, req.AppendTo(nil))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if forwarded := d.Refused == nil; forwarded != c.forward {
			t.Errorf("%s: forwarded %v, want %v", c.name, forwarded, c.forward)
		}
	}
	if want := (ProducerBatch{ProducerID: 7, Epoch: 2, FirstSeq: 100, LastSeq: 104}); len(asked) == 0 || asked[0] != want {
		t.Errorf("Written was asked %+v first, want %+v", asked, want)
	}
	if len(asked) != 3 {
		t.Errorf("Written was asked %d times, want 3 (only for one idempotent batch each)", len(asked))
	}
}
