package instance_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/proxy"
)

// TestRealRouteFreezeForwardsAResentWrite: a write the primary holds, whose answer its client
// never got (the instance that forwarded it was killed, in TestRouteSwitchDriverKilledAtEachStep),
// is resent unchanged through a frozen route. The freeze forwards it, and the primary answers
// from its idempotence cache with the offset it was written at, appending nothing. Refused
// until the switch, the resend reached the standby, which knows none of the primary's
// producer ids, and was written a second time. A batch the primary does not hold stays
// refused.
func TestRealRouteFreezeForwardsAResentWrite(t *testing.T) {
	kafkatest.RequireReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, standby := kafkatest.Start(t), kafkatest.Start(t)
	primary.CreateKeptTopic(t, "orders", 1)
	in := instancetest.Start(t, standby, nil, func(c *instance.Config) {
		c.Proxy.Routes = []proxy.RouteConfig{{Name: "app", Listen: "127.0.0.1:0", Mirror: "dr",
			Primary: proxy.RouteUpstream{Bootstrap: primary.Bootstrap()}}}
	})
	polltest.Until(t, time.Minute, "the route opens", func() bool { return in.Proxy.Routes()[0].Open })

	pcl := primary.Client(t)
	topics, err := kadm.NewClient(pcl).ListTopics(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	id := topics["orders"].ID
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionTimeoutMillis = 60000
	resp, err := init.RequestWith(ctx, pcl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("a producer id from the primary: %v", err)
	}
	recs := func(from int) []*kgo.Record {
		var out []*kgo.Record
		for i := from; i < from+3; i++ {
			out = append(out, &kgo.Record{Value: fmt.Appendf(nil, "r%d", i)})
		}
		return out
	}
	lost := kafkatest.IdempotentBatch(t, resp.ProducerID, resp.ProducerEpoch, 0, recs(0))
	next := kafkatest.IdempotentBatch(t, resp.ProducerID, resp.ProducerEpoch, 3, recs(3))
	if code, offset := produceBatch(t, ctx, pcl, id, lost); code != 0 || offset != 0 {
		t.Fatalf("the write straight to the primary: error %d at offset %d", code, offset)
	}

	f := &enforcement.Freeze{Topics: map[string]bool{"orders": true}, Written: instance.PrimaryWritten(ctx, pcl)}
	if err := in.Proxy.FreezeRoute(ctx, "app", f); err != nil {
		t.Fatal(err)
	}
	rcl := kafkatest.NewClient(t, []string{in.Proxy.RouteAddr("app")})
	refusals := 0
	polltest.Eventually(t, 30*time.Second, "the resent write is answered through the frozen route", func() (bool, string) {
		code, offset := produceBatch(t, ctx, rcl, id, lost)
		switch {
		case code == kerr.NotLeaderForPartition.Code: // refused until the primary's producer state is in
			refusals++
			return false, fmt.Sprintf("refused %d times", refusals)
		case code != 0 || offset != 0:
			t.Fatalf("the resent write through the frozen route: error %d at offset %d; the primary wrote it at 0", code, offset)
		}
		return true, ""
	})
	for range 3 {
		if code, _ := produceBatch(t, ctx, rcl, id, next); code != kerr.NotLeaderForPartition.Code {
			t.Fatalf("a new write through the frozen route: error %d, want the freeze's NOT_LEADER_OR_FOLLOWER", code)
		}
	}
	ends, err := kadm.NewClient(pcl).ListEndOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if end, _ := ends.Lookup("orders", 0); end.Offset != 3 {
		t.Fatalf("the primary's log ends at %d: the resend or the new write was appended (want 3, the lost write once)", end.Offset)
	}
	t.Logf("the resend was refused %d times before the primary's producer state was in, then answered with offset 0", refusals)
}

// produceBatch writes batch to orders/0 (whose topic id is id: kgo sends the highest
// version both sides speak, v13+ names topics by id) through cl, acks=all, and returns the
// partition's error code and base offset.
func produceBatch(t *testing.T, ctx context.Context, cl *kgo.Client, id kadm.TopicID, batch []byte) (int16, int64) {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10000
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: "orders", TopicID: id, Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: batch}}}}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("produce: response %+v", resp)
	}
	p := resp.Topics[0].Partitions[0]
	return p.ErrorCode, p.BaseOffset
}

// TestRealSwitchedRouteRefusesTheMirrorWritersProducerID: after a switch, an application's
// batch under the producer id the standby gave the mirror's writer on that partition (both
// clusters count ids from 0: the primary may have given an application the same id) is
// refused with UNKNOWN_PRODUCER_ID through the route, so the client takes a new id. Sent
// straight to the standby, the same batch, its sequences those of the writer's last batch, is
// answered as a duplicate and not written: a write lost without an error, which is what the
// route prevents (docs/cutover.md).
func TestRealSwitchedRouteRefusesTheMirrorWritersProducerID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	primary, standby, in := startRouteWorld(t, ctx, "orders")
	prod := primary.Client(t, kgo.DefaultProduceTopic("orders"), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	for i := range 5 { // one record a batch: the writer's last batch is one record
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "r%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	sadm := kadm.NewClient(standby.Client(t))
	polltest.Eventually(t, 2*time.Minute, "the mirror copies orders/0", func() (bool, string) {
		ends, err := sadm.ListEndOffsets(ctx, "orders")
		if err != nil {
			return false, err.Error()
		}
		end, _ := ends.Lookup("orders", 0)
		return end.Offset == 5, fmt.Sprintf("end offset %d", end.Offset)
	})
	switchRoute(t, ctx, in, "--switch", "--route", "app")

	described, err := sadm.DescribeProducers(ctx, kadm.TopicsSet{"orders": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	var writer kadm.DescribedProducer
	for _, p := range described["orders"].Partitions[0].ActiveProducers {
		writer = p
	}
	if writer.LastSequence < 0 {
		t.Fatalf("no mirror writer on the standby's orders/0: %+v", described)
	}
	topics, err := sadm.ListTopics(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	clash := kafkatest.IdempotentBatch(t, writer.ProducerID, writer.ProducerEpoch, writer.LastSequence, []*kgo.Record{{Value: []byte("clash")}})
	endOf := func() int64 {
		ends, err := sadm.ListEndOffsets(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		end, _ := ends.Lookup("orders", 0)
		return end.Offset
	}

	rcl := kafkatest.NewClient(t, []string{in.Proxy.RouteAddr("app")})
	if code, _ := produceBatch(t, ctx, rcl, topics["orders"].ID, clash); code != kerr.UnknownProducerID.Code {
		t.Fatalf("a batch under the mirror writer's producer id through the switched route: error %d, want UNKNOWN_PRODUCER_ID", code)
	}
	// What the route keeps the application from: the standby takes the batch for the
	// writer's last one and answers it written.
	before := endOf()
	if code, _ := produceBatch(t, ctx, standby.Client(t), topics["orders"].ID, clash); code != 0 || endOf() != before {
		t.Fatalf("straight to the standby: error %d, end offset %d (was %d); expected a duplicate's answer and nothing written", code, endOf(), before)
	}
	t.Logf("the mirror's writer on orders/0 is producer %d epoch %d (last sequence %d); sent straight to the standby, the clashing batch was answered as written and was not",
		writer.ProducerID, writer.ProducerEpoch, writer.LastSequence)
}

// TestRealSwitchedRouteJavaProducerMovesPastTheWritersID: the Java producer whose producer id
// from the primary is the one the standby gave the mirror's writer goes on after the switch.
// The route refuses its batches with UNKNOWN_PRODUCER_ID (above); the Java producer answers by
// bumping its epoch past the writer's only when the refusal carries a log start offset, and
// with -1 resent the same batch once a second, forever (TestRealRouteSwitchEveryClient's Java
// producer was stuck so, whenever the clusters' producer ids happened to meet). The clash is
// arranged: the primary hands out producer ids one after another from 0, so the test takes
// ids there until the next one is the writer's.
func TestRealSwitchedRouteJavaProducerMovesPastTheWritersID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const topic = "orders"
	primary, standby, in := startRouteWorld(t, ctx, topic)
	route := in.Proxy.RouteAddr("app")

	// Records copied to every partition (written without a producer id: the primary's first
	// id is still to be given), so that the standby has a writer on each.
	seed := primary.Client(t, kgo.DisableIdempotentWrite(), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range int32(3) {
		if err := seed.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte("seed")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	sadm := kadm.NewClient(standby.Client(t))
	var writer int64 = -1
	polltest.Eventually(t, 2*time.Minute, "the mirror's writers on the standby", func() (bool, string) {
		described, err := sadm.DescribeProducers(ctx, kadm.TopicsSet{topic: {0: {}, 1: {}, 2: {}}})
		if err != nil {
			return false, err.Error()
		}
		writers := 0
		writer = -1
		for _, p := range described[topic].Partitions {
			for _, ap := range p.ActiveProducers {
				writers++
				writer = max(writer, ap.ProducerID)
			}
		}
		return writers == 3, fmt.Sprintf("%d writers", writers)
	})
	pcl := primary.Client(t)
	for want := int64(0); want < writer; want++ {
		resp, err := (&kmsg.InitProducerIDRequest{ProducerID: -1, ProducerEpoch: -1, TransactionTimeoutMillis: 60000}).RequestWith(ctx, pcl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil || resp.ProducerID != want {
			t.Fatalf("taking producer id %d on the primary: got %d (%v); the clash cannot be arranged", want, resp.ProducerID, err)
		}
	}

	// Round robin: the producer writes the writer's partition, whichever it is (the default
	// partitioner kept to one partition).
	cfgFile := javaProducerConfig(t, "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner")
	javaProd := kafkatest.StartVerifiable(t, ctx, "org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", route,
		"--topic", topic, "--max-messages", "-1", "--throughput", "100", "--value-prefix", "1", "--producer.config", cfgFile)
	acked := func() int { return len(javaProd.Values("producer_send_success")) }
	polltest.Until(t, time.Minute, "the Java producer writes through the route", func() bool { return acked() > 50 })
	switchRoute(t, ctx, in, "--switch", "--route", "app")
	before := acked()
	polltest.Eventually(t, 2*time.Minute, "the Java producer goes on after the switch", func() (bool, string) {
		return acked() > before+100, fmt.Sprintf("%d acknowledged, %d at the switch", acked(), before)
	})
	javaProd.Stop(t)
	if errs := javaProd.SendErrors(); len(errs) > 0 {
		t.Errorf("the Java producer saw %d send errors (first %s)", len(errs), errs[0])
	}
	if !strings.Contains(javaProd.Stderr(), "UNKNOWN_PRODUCER_ID") {
		t.Errorf("the Java producer was never refused for the clash: its producer id was not the writer's %d", writer)
	}
	count := map[string]int{}
	for _, v := range readTopic(t, ctx, standby, topic, 3) {
		count[v]++
	}
	for _, v := range javaProd.Values("producer_send_success") {
		if count[v] != 1 {
			t.Errorf("acknowledged %s is %d times on the standby", v, count[v])
		}
	}
	t.Logf("the Java producer took the writer's producer id %d; %d records acknowledged, %d after the switch", writer, acked(), acked()-before)
}
