package enforcement

import (
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
	d, err := frozen(false).Produce(9, body)
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
	if d, err := (&Freeze{}).Produce(9, body); err != nil || d.Refused != nil {
		t.Fatalf("an empty freeze refused %+v (%v)", d.Refused, err)
	}
	if d, err := frozen(false).Produce(13, produceBody(13, map[string][]int32{"orders": {0}})); err == nil {
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
	fr := frozen(true)
	f.Fuzz(func(t *testing.T, key, version int16, body []byte) {
		switch key {
		case 0:
			if version < 0 || version > 12 {
				return
			}
			d, err := fr.Produce(version, body)
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
