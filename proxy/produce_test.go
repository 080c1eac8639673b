package proxy

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// produceResponse builds a Produce response with every optional part filled, and node
// endpoints when brokers is set.
func produceResponse(version int16, brokers bool) []byte {
	r := kmsg.NewPtrProduceResponse()
	r.SetVersion(version)
	r.ThrottleMillis = 7
	for ti, name := range []string{"orders", "payments"} {
		t := kmsg.NewProduceResponseTopic()
		t.Topic, t.TopicID = name, [16]byte{byte(ti + 1)}
		for p := range int32(3) {
			pr := kmsg.NewProduceResponseTopicPartition()
			pr.Partition, pr.BaseOffset, pr.LogStartOffset = p, 1000*int64(p), 3
			if p == 1 {
				pr.ErrorCode = 6 // NOT_LEADER_OR_FOLLOWER
				msg := "moved"
				pr.ErrorMessage = &msg
				pr.CurrentLeader.LeaderID, pr.CurrentLeader.LeaderEpoch = 2, 9
				rec := kmsg.NewProduceResponseTopicPartitionErrorRecord()
				rec.RelativeOffset, rec.ErrorMessage = 4, &msg
				pr.ErrorRecords = append(pr.ErrorRecords, rec)
			}
			t.Partitions = append(t.Partitions, pr)
		}
		r.Topics = append(r.Topics, t)
	}
	if brokers {
		b := kmsg.NewProduceResponseBroker()
		b.NodeID, b.Host, b.Port = 2, "broker-2.internal", 9092
		r.Brokers = append(r.Brokers, b)
	}
	return r.AppendTo(nil)
}

func TestProduceNodeEndpoints(t *testing.T) {
	for v := int16(10); v <= kmsg.NewPtrProduceResponse().MaxVersion(); v++ {
		if produceNodeEndpoints(produceResponse(v, false), v) {
			t.Errorf("v%d: a response without node endpoints was taken to have them", v)
		}
		with := produceResponse(v, true)
		if !produceNodeEndpoints(with, v) {
			t.Errorf("v%d: node endpoints missed", v)
		}
		for n := range len(with) {
			if !produceNodeEndpoints(with[:n], v) {
				t.Errorf("v%d: a response cut at %d of %d bytes was taken to carry no node endpoints", v, n, len(with))
			}
		}
	}
}

// The scan may only answer false for bodies that kmsg decodes with no node endpoints:
// anything else would let a broker address reach the client.
func FuzzProduceNodeEndpoints(f *testing.F) {
	for v := int16(10); v <= kmsg.NewPtrProduceResponse().MaxVersion(); v++ {
		f.Add(produceResponse(v, false), v)
		f.Add(produceResponse(v, true), v)
	}
	f.Fuzz(func(t *testing.T, body []byte, version int16) {
		if version < 10 || version > kmsg.NewPtrProduceResponse().MaxVersion() {
			return
		}
		if produceNodeEndpoints(body, version) {
			return
		}
		r := kmsg.NewPtrProduceResponse()
		r.SetVersion(version)
		if err := r.ReadFrom(body); err == nil && len(r.Brokers) > 0 {
			t.Fatalf("v%d: kmsg decodes %d node endpoints that the scan missed", version, len(r.Brokers))
		}
	})
}
