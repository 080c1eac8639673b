package enforcement

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

var ordersID = statetopic.UUID{7}

// view: mirror dr mirrors "orders" (2 partitions: 0 STOPPED, 1 MIRRORING).
func testGuard(t testing.TB) *Guard {
	t.Helper()
	v := statetopic.NewView()
	put := func(k statetopic.Key, val any) {
		b, err := statetopic.EncodeValue(val)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Apply(k.Bytes(), b); err != nil {
			t.Fatal(err)
		}
	}
	put(statetopic.MirrorConfigKey("dr"), &statetopic.MirrorConfig{Configs: map[string]string{"bootstrap.servers": "s:1"}})
	put(statetopic.MirrorTopicKey("dr", "orders"), &statetopic.MirrorTopic{SourceTopicID: ordersID, Partitions: 2, Desired: statetopic.DesireStop})
	put(statetopic.PartitionStateKey("dr", ordersID, 0), &statetopic.PartitionState{Topic: "orders", State: protocol.MirrorStateStopped})
	put(statetopic.PartitionStateKey("dr", ordersID, 1), &statetopic.PartitionState{Topic: "orders", State: protocol.MirrorStateStopping})
	g, err := New(Options{ResolveTopicID: func(_ context.Context, id [16]byte) (string, error) {
		if id == [16]byte(ordersID) {
			return "orders", nil
		}
		return "other", nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	g.Update(FromView(v))
	return g
}

func produceBody(version int16, topics map[string][]int32) []byte {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	req.Acks = -1
	for name, parts := range topics {
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = name
		if version >= 13 {
			rt.Topic, rt.TopicID = "", [16]byte{byte(len(name))}
			if name == "orders" {
				rt.TopicID = [16]byte(ordersID)
			}
		}
		for _, p := range parts {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = p, []byte("batch")
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	return req.AppendTo(nil)
}

func TestFilterProduceSplitsMixedRequests(t *testing.T) {
	g := testGuard(t)
	for _, version := range []int16{7, 9, 12, kmsg.NewPtrProduceRequest().MaxVersion()} {
		d, err := g.FilterProduce(context.Background(), version, produceBody(version, map[string][]int32{"orders": {0, 1}, "payments": {0}}))
		if err != nil {
			t.Fatalf("v%d: %v", version, err)
		}
		if d.Refused == nil || len(d.Refused.Topics) != 1 || len(d.Refused.Topics[0].Partitions) != 1 {
			t.Fatalf("v%d: refused %+v, want exactly orders/1", version, d.Refused)
		}
		rp := d.Refused.Topics[0].Partitions[0]
		if rp.Partition != 1 || rp.ErrorCode != protocol.ErrPolicyViolation.Code || !strings.Contains(*rp.ErrorMessage, "kmirror mirrors --remove --mirror dr --topics orders") {
			t.Fatalf("v%d: refusal %+v %q", version, rp, *rp.ErrorMessage)
		}
		fwd := kmsg.NewPtrProduceRequest()
		fwd.SetVersion(version)
		if err := fwd.ReadFrom(d.Forward); err != nil {
			t.Fatalf("v%d: forwarded body does not decode: %v", version, err)
		}
		got := map[int32]bool{}
		for i, ft := range fwd.Topics {
			for _, p := range ft.Partitions {
				if string(p.Records) != "batch" {
					t.Fatalf("v%d: forwarded records changed: %q", version, p.Records)
				}
				got[p.Partition+int32(i)*100] = true
			}
		}
		// orders/0 is STOPPED (writable) and payments/0 is no mirror topic.
		if len(got) != 2 {
			t.Fatalf("v%d: forwarded %v, want orders/0 and payments/0", version, fwd.Topics)
		}
		resp := kmsg.NewPtrProduceResponse()
		resp.Topics = []kmsg.ProduceResponseTopic{{Topic: "payments", Partitions: []kmsg.ProduceResponseTopicPartition{{Partition: 0}}}}
		MergeProduce(resp, d.Refused)
		if len(resp.Topics) != 2 {
			t.Fatalf("v%d: merged response %+v", version, resp.Topics)
		}
	}
}

func TestFilterProduceAllRefusedAndNothingRefused(t *testing.T) {
	g := testGuard(t)
	body := produceBody(9, map[string][]int32{"orders": {1}})
	d, err := g.FilterProduce(context.Background(), 9, body)
	if err != nil || d.Forward != nil || d.Refused == nil {
		t.Fatalf("all refused: %+v, %v", d, err)
	}
	body = produceBody(9, map[string][]int32{"payments": {0, 1}})
	d, err = g.FilterProduce(context.Background(), 9, body)
	if err != nil || d.Refused != nil || &d.Forward[0] != &body[0] {
		t.Fatal("a request with no mirror topic must be forwarded as is, not re-encoded")
	}
}

func TestReadOnlyTopicErrorCodeOption(t *testing.T) {
	if _, err := New(Options{ErrorCode: 3}); err == nil {
		t.Fatal("error code 3 accepted")
	}
	g, err := New(Options{ErrorCode: protocol.ErrReadOnlyTopic.Code})
	if err != nil {
		t.Fatal(err)
	}
	g.Update(testGuard(t).Set())
	d, _ := g.FilterProduce(context.Background(), 9, produceBody(9, map[string][]int32{"orders": {1}}))
	if d.Refused.Topics[0].Partitions[0].ErrorCode != 134 {
		t.Fatalf("code %d, want 134", d.Refused.Topics[0].Partitions[0].ErrorCode)
	}
}

func TestCheckAdmin(t *testing.T) {
	g := testGuard(t)
	ctx := context.Background()
	del := kmsg.NewPtrDeleteTopicsRequest()
	del.SetVersion(6)
	del.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr("orders")}, {Topic: kmsg.StringPtr("payments")}}
	resp, err := g.CheckAdmin(ctx, 20, 6, del.AppendTo(nil))
	if err != nil || resp == nil {
		t.Fatalf("delete of a mirror topic passed: %v", err)
	}
	dr := resp.(*kmsg.DeleteTopicsResponse)
	if len(dr.Topics) != 2 || !strings.Contains(*dr.Topics[1].ErrorMessage, `not applied to "payments"`) {
		t.Fatalf("delete response %+v", dr.Topics)
	}

	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	alter.SetVersion(1)
	alter.Resources = []kmsg.IncrementalAlterConfigsRequestResource{{ResourceType: 2, ResourceName: "orders",
		Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "min.insync.replicas", Value: kmsg.StringPtr("2")}}}}
	if resp, err := g.CheckAdmin(ctx, 44, 1, alter.AppendTo(nil)); err != nil || resp != nil {
		t.Fatalf("a destination-local config (in topic.properties.exclude) was refused: %v %v", resp, err)
	}
	alter.Resources[0].Configs[0].Name = "retention.ms"
	if resp, err := g.CheckAdmin(ctx, 44, 1, alter.AppendTo(nil)); err != nil || resp == nil {
		t.Fatalf("a synced config change passed: %v", err)
	}

	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.SetVersion(3)
	cp.Topics = []kmsg.CreatePartitionsRequestTopic{{Topic: "payments", Count: 5}}
	if resp, err := g.CheckAdmin(ctx, 37, 3, cp.AppendTo(nil)); err != nil || resp != nil {
		t.Fatalf("CreatePartitions of an ordinary topic refused: %v %v", resp, err)
	}
}

func TestDecorateDescribeConfigs(t *testing.T) {
	g := testGuard(t)
	resp := kmsg.NewPtrDescribeConfigsResponse()
	resp.Resources = []kmsg.DescribeConfigsResponseResource{{ResourceType: 2, ResourceName: "orders"}, {ResourceType: 2, ResourceName: "payments"}}
	if !g.DecorateDescribeConfigs(resp) {
		t.Fatal("not decorated")
	}
	if c := resp.Resources[0].Configs; len(c) != 1 || c[0].Name != "mirror.name" || *c[0].Value != "dr" || !c[0].ReadOnly {
		t.Fatalf("orders configs %+v", c)
	}
	if len(resp.Resources[1].Configs) != 0 {
		t.Fatal("an ordinary topic got mirror.name")
	}
}

func TestStoppedTopicIsWritable(t *testing.T) {
	v := statetopic.NewView()
	for k, val := range map[statetopic.Key]any{
		statetopic.MirrorConfigKey("dr"):                &statetopic.MirrorConfig{},
		statetopic.MirrorTopicKey("dr", "orders"):       &statetopic.MirrorTopic{SourceTopicID: ordersID, Partitions: 1},
		statetopic.PartitionStateKey("dr", ordersID, 0): &statetopic.PartitionState{State: protocol.MirrorStateStopped},
	} {
		b, _ := statetopic.EncodeValue(val)
		_ = v.Apply(k.Bytes(), b)
	}
	if s := FromView(v); !s.Empty() {
		t.Fatalf("a fully STOPPED topic is still read-only: %+v", s.topics)
	}
}

func FuzzFilterProduce(f *testing.F) {
	f.Add(int16(9), produceBody(9, map[string][]int32{"orders": {0, 1}, "x": {2}}))
	f.Add(int16(13), produceBody(13, map[string][]int32{"orders": {1}}))
	g := testGuard(f)
	f.Fuzz(func(t *testing.T, version int16, body []byte) {
		if version < 0 || version > kmsg.NewPtrProduceRequest().MaxVersion() {
			return
		}
		d, err := g.FilterProduce(context.Background(), version, body)
		if err != nil || d.Forward == nil {
			return
		}
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(version)
		if err := req.ReadFrom(d.Forward); err != nil && d.Refused != nil {
			t.Fatalf("re-encoded forward body does not decode: %v", err)
		}
	})
}

// A lost mirror's topic is read-only whole, with the way to recover it;
// a topic the view holds keeps the view's rule.
func TestWithLostKeepsLostTopicsReadOnly(t *testing.T) {
	g := testGuard(t)
	g.Update(g.Set().WithLost(map[string]string{"payments": "old", "orders": "old"}))
	s := g.Set()
	why := s.refusal("payments", 3)
	if !strings.Contains(why, `mirror "old", whose state was lost`) || !strings.Contains(why, "kmirror mirrors --recover-state --mirror old") {
		t.Fatalf("refusal of a lost mirror's topic: %q", why)
	}
	if s.refusal("orders", 0) != "" || s.Mirror("orders") != "dr" {
		t.Fatalf("orders/0 is STOPPED in the view and must stay writable (mirror %q)", s.Mirror("orders"))
	}
	if s.refusal("other", 0) != "" {
		t.Fatal("a topic of no mirror refused")
	}
}

// While the state is not read, every write is refused: Produce with a retriable error (the
// client's retry passes once the state is read), admin changes with a message saying to
// retry; a lost mirror's topics stay refused; nothing panics on a topic the set does not hold.
func TestLoadingRefusesEveryWrite(t *testing.T) {
	g := testGuard(t)
	g.Update(Loading("partition 3 read to offset 10 of 12").WithLost(map[string]string{"ledger": "old"}))
	ctx := context.Background()
	for _, topics := range []map[string][]int32{{"payments": {0}}, {"orders": {0}}, {"ledger": {0}}} {
		d, err := g.FilterProduce(ctx, 9, produceBody(9, topics))
		if err != nil || d.Forward != nil || d.Refused == nil {
			t.Fatalf("%v while loading: forwarded %v, %v", topics, d.Forward != nil, err)
		}
		p := d.Refused.Topics[0].Partitions[0]
		if p.ErrorCode != kerr.NotLeaderForPartition.Code || !strings.Contains(*p.ErrorMessage, "retry in a moment") {
			t.Fatalf("%v while loading: code %d %v, want the retriable NOT_LEADER_OR_FOLLOWER saying to retry", topics, p.ErrorCode, p.ErrorMessage)
		}
	}
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	alter.SetVersion(1)
	alter.Resources = []kmsg.IncrementalAlterConfigsRequestResource{{ResourceType: 2, ResourceName: "payments",
		Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "retention.ms", Value: kmsg.StringPtr("2")}}}}
	resp, err := g.CheckAdmin(ctx, 44, 1, alter.AppendTo(nil))
	if err != nil || resp == nil {
		t.Fatalf("a config change passed while loading: %v", err)
	}
	if r := resp.(*kmsg.IncrementalAlterConfigsResponse).Resources[0]; !strings.Contains(*r.ErrorMessage, "retry in a moment") {
		t.Fatalf("config change refused with %v", r.ErrorMessage)
	}
	del := kmsg.NewPtrDeleteTopicsRequest()
	del.SetVersion(6)
	del.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr("payments")}}
	if resp, err := g.CheckAdmin(ctx, 20, 6, del.AppendTo(nil)); err != nil || resp == nil {
		t.Fatalf("a topic deletion passed while loading: %v", err)
	}
	if !g.Active() {
		t.Fatal("a loading guard is not active: the proxy would skip it")
	}
}
