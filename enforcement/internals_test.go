package enforcement

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func internalsGuard(t testing.TB) *Guard {
	g := testGuard(t) // "orders" is read-only (partition 1 not yet STOPPED)
	g.SetInternals(Internals{StateTopic: "__mirror_state", MarksTopic: "__mirror_state_marks", GroupID: "kmirror-coordinators", TransactionalIDPrefix: "kmirror-"})
	return g
}

func txnProduceBody(version int16, txn string, topics ...string) []byte {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	req.Acks = -1
	if txn != "" {
		req.TransactionID = kmsg.StringPtr(txn)
	}
	for _, name := range topics {
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = name
		for p := int32(0); p < 2; p++ {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = p, []byte("batch of "+name)
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	return req.AppendTo(nil)
}

func TestProduceTouchesInternals(t *testing.T) {
	g := internalsGuard(t)
	for _, v := range []int16{3, 7, 8, 9, 12} {
		flexible := v >= 9
		for _, c := range []struct {
			txn    string
			topics []string
			want   bool
		}{
			{"", []string{"payments"}, false},
			{"app-txn", []string{"payments", "orders"}, false},
			{"", []string{"payments", "__mirror_state"}, true},
			{"kmirror-dr-x-0", []string{"payments"}, true},
			{"", []string{"__mirror_state_not"}, false},
			{"", []string{"__mirror_state_marks"}, true},
		} {
			body := txnProduceBody(v, c.txn, c.topics...)
			if got := g.ProduceTouches(v, flexible, body); got != c.want {
				t.Errorf("v%d txn %q topics %v: touches %v, want %v", v, c.txn, c.topics, got, c.want)
			}
		}
		body := txnProduceBody(v, "app", "payments", "orders")
		if n := testing.AllocsPerRun(100, func() { g.ProduceTouches(v, flexible, body) }); n != 0 {
			t.Errorf("v%d: ProduceTouches allocates %.0f times per call; it runs on every Produce", v, n)
		}
		if !g.ProduceTouches(v, flexible, body[:len(body)-3]) {
			t.Errorf("v%d: a truncated body must be left to the full decode", v)
		}
	}
	if !g.ProduceTouches(13, true, txnProduceBody(13, "", "payments")) {
		t.Error("v13 (topic ids) must be left to the full decode")
	}
	if (&Guard{}).ProduceTouches(7, false, txnProduceBody(7, "", "__mirror_state")) {
		t.Error("without internals nothing is touched")
	}
}

func TestProduceHeadClear(t *testing.T) {
	g := internalsGuard(t)
	for _, c := range []struct {
		txn    string
		topics []string
		want   bool
	}{
		{"", []string{"payments"}, true},
		{"app", []string{"payments"}, true},
		{"", []string{"__mirror_state"}, false},
		{"kmirror-dr-x-0", []string{"payments"}, false},
		{"", []string{"payments", "other"}, false}, // the second name may lie beyond the head
	} {
		for _, v := range []int16{7, 9, 12} {
			body := txnProduceBody(v, c.txn, c.topics...)
			if got := g.ProduceHeadClear(v, v >= 9, body[:min(len(body), 40)]); got != c.want {
				t.Errorf("v%d %+v: clear %v, want %v", v, c, got, c.want)
			}
		}
	}
	if g.ProduceHeadClear(9, true, txnProduceBody(9, "", "payments")[:8]) {
		t.Error("a head that ends inside the topic name proves nothing")
	}
}

func TestProduceInternalsSplits(t *testing.T) {
	g := internalsGuard(t)
	ctx := context.Background()
	for _, v := range []int16{3, 9, 12} {
		d, ref, err := g.ProduceInternals(ctx, v, v >= 9, txnProduceBody(v, "", "payments", "__mirror_state", "orders"))
		if err != nil {
			t.Fatal(err)
		}
		if ref == nil || ref.Kind != RefusedStateTopic || ref.Resource != "__mirror_state" || ref.Code != kerr.TopicAuthorizationFailed.Code {
			t.Fatalf("v%d: refusal %+v", v, ref)
		}
		codes := map[string]int16{}
		for _, rt := range d.Refused.Topics {
			for _, rp := range rt.Partitions {
				codes[rt.Topic+"/"+string(rune('0'+rp.Partition))] = rp.ErrorCode
			}
		}
		want := map[string]int16{"__mirror_state/0": 29, "__mirror_state/1": 29, "orders/1": kerr.PolicyViolation.Code}
		if len(codes) != len(want) {
			t.Fatalf("v%d: refused %v, want %v", v, codes, want)
		}
		for k, c := range want {
			if codes[k] != c {
				t.Fatalf("v%d: refused %v, want %v", v, codes, want)
			}
		}
		fwd := kmsg.NewPtrProduceRequest()
		fwd.SetVersion(v)
		if err := fwd.ReadFrom(d.Forward); err != nil {
			t.Fatal(err)
		}
		if len(fwd.Topics) != 2 || fwd.Topics[0].Topic != "payments" || fwd.Topics[1].Topic != "orders" || len(fwd.Topics[1].Partitions) != 1 {
			t.Fatalf("v%d: forwarded %+v", v, fwd.Topics)
		}

		d, ref, err = g.ProduceInternals(ctx, v, v >= 9, txnProduceBody(v, "kmirror-dr-abc-0", "payments"))
		if err != nil || ref == nil || ref.Kind != RefusedTransactionalID || d.Forward != nil ||
			d.Refused.Topics[0].Partitions[0].ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code {
			t.Fatalf("v%d: kmirror transactional id: %+v %+v %v", v, d, ref, err)
		}
	}
}

// encode returns a request's body and whether it is flexible.
func encode(req kmsg.Request, version int16) ([]byte, bool) {
	req.SetVersion(version)
	return req.AppendTo(nil), req.IsFlexible()
}

// internalsCase is one request CheckInternals sees, and what it must do with it.
type internalsCase struct {
	name string
	req  kmsg.Request
	kind string // "" = forwarded
	code int16
}

func TestCheckInternals(t *testing.T) {
	g := internalsGuard(t)
	for _, c := range internalsCases() {
		for _, v := range []int16{c.req.GetVersion(), c.req.MaxVersion()} {
			if _, ok := c.req.(*kmsg.AddPartitionsToTxnRequest); ok && v >= 4 {
				continue // v4+ is brokers' batch form
			}
			if _, ok := c.req.(*kmsg.ElectLeadersRequest); ok && v == 0 {
				v = 1 // v0 has no election type
			}
			checkInternalsCase(t, g, c, v)
		}
	}
	// The hot keys are looked at in place.
	body, flexible := encode(reqHeartbeat("app"), 4)
	if n := testing.AllocsPerRun(100, func() { _, _, _ = g.CheckInternals(context.Background(), 12, 4, flexible, body) }); n != 0 {
		t.Errorf("a Heartbeat of another group allocates %.0f times", n)
	}
}

// checkInternalsCase sends c's request at version v through the guard.
func checkInternalsCase(t *testing.T, g *Guard, c internalsCase, v int16) {
	t.Helper()
	body, flexible := encode(c.req, v)
	resp, ref, err := g.CheckInternals(context.Background(), c.req.Key(), v, flexible, body)
	if err != nil {
		t.Fatalf("%s v%d: %v", c.name, v, err)
	}
	if c.kind == "" {
		if resp != nil {
			t.Errorf("%s v%d: refused (%+v), want forwarded", c.name, v, ref)
		}
		return
	}
	if resp == nil || ref == nil || ref.Kind != c.kind || ref.Code != c.code || ref.Reason == "" {
		t.Errorf("%s v%d: got %+v, want %s with code %d", c.name, v, ref, c.kind, c.code)
		return
	}
	if resp.GetVersion() != v {
		t.Errorf("%s: response v%d for request v%d", c.name, resp.GetVersion(), v)
	}
	if ref.Resource != "" && !strings.Contains(ref.Reason, ref.Resource) {
		t.Errorf("%s: the message %q does not name %q", c.name, ref.Reason, ref.Resource)
	}
	if err := kerr.ErrorForCode(ref.Code); err == nil {
		t.Errorf("%s: code %d is no error", c.name, ref.Code)
	}
}

// internalsCases is the table: kmirror's own group, transactional ids, state topics and
// mirror topics against the same requests for an application's.
func internalsCases() []internalsCase {
	const group, txn = "kmirror-coordinators", "kmirror-dr-abc-0"
	return []internalsCase{
		{"join kmirror's group", reqJoin(group), RefusedGroup, 30},
		{"join another group", reqJoin("app"), "", 0},
		{"heartbeat", reqHeartbeat(group), RefusedGroup, 30},
		{"heartbeat other", reqHeartbeat("kmirror-coordinators-x"), "", 0},
		{"offset commit", reqCommit(group), RefusedGroup, 30},
		{"offset commit other", reqCommit("app"), "", 0},
		{"consumer group heartbeat", reqConsumerHeartbeat(group), RefusedGroup, 30},
		{"delete groups", reqDeleteGroups("app", group), RefusedGroup, 30},
		{"delete other groups", reqDeleteGroups("app"), "", 0},
		{"init producer id", reqInitPID(kmsg.StringPtr(txn)), RefusedTransactionalID, 53},
		{"init idempotent producer", reqInitPID(nil), "", 0},
		{"init app txn", reqInitPID(kmsg.StringPtr("app-kmirror-1")), "", 0},
		{"end txn", reqEndTxn(txn), RefusedTransactionalID, 53},
		{"add offsets, kmirror's txn", reqAddOffsets(txn, "app"), RefusedTransactionalID, 53},
		{"add offsets, kmirror's group", reqAddOffsets("app", group), RefusedGroup, 30},
		{"txn offset commit", reqTxnCommit("app", group), RefusedGroup, 30},
		{"add partitions", reqAddParts(txn), RefusedTransactionalID, 53},
		{"add partitions other", reqAddParts("app"), "", 0},
		{"write txn markers", reqMarkers(), RefusedTxnMarkers, 31},
		{"unclean election on a mirror topic", reqElect(1, "payments", "orders"), RefusedUncleanElection, 44},
		{"unclean election everywhere", reqElect(1), RefusedUncleanElection, 44},
		{"preferred election on a mirror topic", reqElect(0, "orders"), "", 0},
		{"unclean election elsewhere", reqElect(1, "payments"), "", 0},
		{"delete state topic", reqDeleteTopics("payments", "__mirror_state"), RefusedStateTopic, 29},
		{"delete other topic", reqDeleteTopics("payments"), "", 0},
		{"alter state topic", reqAlter("__mirror_state"), RefusedStateTopic, 29},
		{"delete records", reqDeleteRecords("__mirror_state"), RefusedStateTopic, 29},
		{"create partitions", reqCreateParts("__mirror_state"), RefusedStateTopic, 29},
		{"create state topic", reqCreateTopics("__mirror_state"), RefusedStateTopic, 29},
		{"delete marks topic", reqDeleteTopics("__mirror_state_marks"), RefusedStateTopic, 29},
		{"delete records of marks topic", reqDeleteRecords("__mirror_state_marks"), RefusedStateTopic, 29},
	}
}

// The requests of the table, each with what the guard looks at.

func reqJoin(gr string) kmsg.Request {
	r := kmsg.NewPtrJoinGroupRequest()
	r.Group, r.ProtocolType = gr, "consumer"
	return r
}

func reqHeartbeat(gr string) kmsg.Request {
	r := kmsg.NewPtrHeartbeatRequest()
	r.Group = gr
	return r
}

func reqCommit(gr string) kmsg.Request {
	r := kmsg.NewPtrOffsetCommitRequest()
	r.Group = gr
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = "__mirror_state"
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	t.Partitions = append(t.Partitions, p)
	r.Topics = append(r.Topics, t)
	return r
}

func reqConsumerHeartbeat(gr string) kmsg.Request {
	r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	r.Group = gr
	return r
}

func reqInitPID(id *string) kmsg.Request {
	r := kmsg.NewPtrInitProducerIDRequest()
	r.TransactionalID = id
	return r
}

func reqEndTxn(id string) kmsg.Request {
	r := kmsg.NewPtrEndTxnRequest()
	r.TransactionalID = id
	return r
}

func reqAddOffsets(id, gr string) kmsg.Request {
	r := kmsg.NewPtrAddOffsetsToTxnRequest()
	r.TransactionalID, r.Group = id, gr
	return r
}

func reqTxnCommit(id, gr string) kmsg.Request {
	r := kmsg.NewPtrTxnOffsetCommitRequest()
	r.TransactionalID, r.Group = id, gr
	return r
}

func reqAddParts(id string) kmsg.Request {
	r := kmsg.NewPtrAddPartitionsToTxnRequest()
	r.TransactionalID = id
	tp := kmsg.NewAddPartitionsToTxnRequestTopic()
	tp.Topic, tp.Partitions = "payments", []int32{0}
	r.Topics = append(r.Topics, tp)
	return r
}

func reqDeleteGroups(gs ...string) kmsg.Request {
	r := kmsg.NewPtrDeleteGroupsRequest()
	r.Groups = gs
	return r
}

func reqMarkers() kmsg.Request {
	markers := kmsg.NewPtrWriteTxnMarkersRequest()
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	mt.Topic, mt.Partitions = "orders", []int32{0}
	m.Topics = append(m.Topics, mt)
	markers.Markers = append(markers.Markers, m)
	return markers
}

func reqElect(typ int8, topics ...string) kmsg.Request {
	r := kmsg.NewPtrElectLeadersRequest()
	r.ElectionType = typ
	if topics == nil {
		r.Topics = nil
	}
	for _, n := range topics {
		tp := kmsg.NewElectLeadersRequestTopic()
		tp.Topic, tp.Partitions = n, []int32{0, 1}
		r.Topics = append(r.Topics, tp)
	}
	return r
}

func reqDeleteTopics(names ...string) kmsg.Request {
	r := kmsg.NewPtrDeleteTopicsRequest()
	r.TopicNames = names
	for _, n := range names {
		tp := kmsg.NewDeleteTopicsRequestTopic()
		tp.Topic = kmsg.StringPtr(n)
		r.Topics = append(r.Topics, tp)
	}
	return r
}

func reqAlter(name string) kmsg.Request {
	r := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, name
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value = "cleanup.policy", kmsg.StringPtr("delete")
	res.Configs = append(res.Configs, c)
	r.Resources = append(r.Resources, res)
	return r
}

func reqDeleteRecords(name string) kmsg.Request {
	r := kmsg.NewPtrDeleteRecordsRequest()
	tp := kmsg.NewDeleteRecordsRequestTopic()
	tp.Topic = name
	p := kmsg.NewDeleteRecordsRequestTopicPartition()
	p.Offset = 5
	tp.Partitions = append(tp.Partitions, p)
	r.Topics = append(r.Topics, tp)
	return r
}

func reqCreateParts(name string) kmsg.Request {
	r := kmsg.NewPtrCreatePartitionsRequest()
	tp := kmsg.NewCreatePartitionsRequestTopic()
	tp.Topic, tp.Count = name, 99
	r.Topics = append(r.Topics, tp)
	return r
}

func reqCreateTopics(name string) kmsg.Request {
	r := kmsg.NewPtrCreateTopicsRequest()
	tp := kmsg.NewCreateTopicsRequestTopic()
	tp.Topic, tp.NumPartitions, tp.ReplicationFactor = name, 1, 1
	r.Topics = append(r.Topics, tp)
	return r
}

// FuzzInternals feeds arbitrary bodies to the in-place readers and the
// decoders behind them: they must neither panic nor read out of bounds.
func FuzzInternals(f *testing.F) {
	g := internalsGuard(f)
	f.Add(int16(0), int16(9), txnProduceBody(9, "kmirror-x", "__mirror_state"))
	f.Add(int16(0), int16(3), txnProduceBody(3, "", "payments", "orders"))
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group = "kmirror-coordinators"
	b, _ := encode(hb, 4)
	f.Add(int16(12), int16(4), b)
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.TransactionalID = kmsg.StringPtr("kmirror-a")
	b, _ = encode(ip, 5)
	f.Add(int16(22), int16(5), b)
	f.Add(int16(68), int16(0), []byte{0x15})
	f.Fuzz(func(t *testing.T, key, version int16, body []byte) {
		req := kmsg.RequestForKey(key)
		if req == nil || version < 0 || version > req.MaxVersion() || !InternalKey(key) {
			return
		}
		req.SetVersion(version)
		flexible := req.IsFlexible()
		if key == 0 {
			if g.ProduceTouches(version, flexible, body) {
				_, _, _ = g.ProduceInternals(context.Background(), version, flexible, body)
			}
			g.ProduceHeadClear(version, flexible, body)
			return
		}
		resp, ref, err := g.CheckInternals(context.Background(), key, version, flexible, body)
		if (resp == nil) != (ref == nil) {
			t.Fatalf("response %v and refusal %v disagree", resp, ref)
		}
		if err == nil && resp != nil {
			resp.AppendTo(nil)
		}
	})
}
