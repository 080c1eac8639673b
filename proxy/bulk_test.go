package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// TestRealBulkHandOffKeepsOrder pipelines large Produce requests (acks=all, acks=0, acks=1)
// between Metadata requests on one plaintext connection. The first large Produce moves the
// connection out of gnet (bulk.go); after that every response must still arrive in request
// order, none for acks=0, every record must land at the offset its place in the stream
// gives it and read back byte for byte, and a bad frame must still close the connection
// without disturbing another. (Real Kafka: kfake stops answering a connection whose Produce
// follows another request in the same write.) The netpoll engine (listener_tcp.go) serves
// every plaintext connection as a handed-off one from its first byte: the same checks hold.
func TestRealBulkHandOffKeepsOrder(t *testing.T) {
	forEachEngine(t, bulkKeepsOrder)
}

// bulkKeepsOrder is TestRealBulkHandOffKeepsOrder with one plaintext engine.
func bulkKeepsOrder(t *testing.T, engine string) {
	p, _, _ := realProxy(t, func(c *Config) { c.PlaintextEngine = engine })
	// Room for the replica wait, the pipelined responses and the read back on a slow machine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The first batch is small enough for gnet to read it whole with the start of the next
	// request (so the hand-off carries both); the next two are more than gnet reads at once
	// (bulkRecordSize).
	counts := []int{30, 150, 150}
	topic := fmt.Sprintf("bulk-%d", time.Now().UnixNano())
	adm, err := kgo.NewClient(kgo.SeedBrokers(p.AdvertisedAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	leaderAddr := createBulkTopic(t, ctx, kadm.NewClient(adm), topic)
	out := bulkRequests(t, topic, counts)
	if len(out) < 3*streamMinBytes {
		t.Fatalf("requests of %d bytes: too small to be spliced", len(out))
	}

	conn, err := net.Dial("tcp", leaderAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A round trip first: the hand-off waits for the upstream connection, which the proxy
	// dials when the client connects.
	metadataRoundTrip(t, conn, 0)
	wrote := make(chan error, 1)
	go func() { _, err := conn.Write(out); wrote <- err }() // the proxy pushes back while it works
	checkBulkResponses(t, conn, counts)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if got := p.handedOff.Load(); engine == EngineGnet && got != 1 {
		t.Fatalf("%d connections handed off, want 1", got)
	}
	if p.spliced.Load() == 0 {
		t.Fatal("no Produce body was spliced")
	}
	// The first Produce follows a Metadata request the fast path wrote: nothing is queued
	// for the writer, so the reader splices it itself (spliceInline).
	if p.splicedInline.Load() == 0 {
		t.Fatal("no Produce body was spliced by the client's reader itself")
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(p.AdvertisedAddr()), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	consumeN(t, ctx, cons, counts[0]+counts[1]+counts[2], func(r *kgo.Record) {
		if want := strconv.Itoa(int(r.Offset)); string(r.Key) != want || !bytes.Equal(r.Value, bulkValue(int(r.Offset))) {
			t.Fatalf("offset %d holds record %s, or its value was corrupted through the proxy", r.Offset, r.Key)
		}
	})

	// The handed-off connection still enforces the frame limit, and only it is closed.
	other := rawDial(t, leaderAddr)
	defer other.Close()
	var huge [4]byte
	binary.BigEndian.PutUint32(huge[:], uint32(p.cfg.MaxFrameBytes+1))
	if _, err := conn.Write(huge[:]); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, conn, fmt.Sprintf("a %d-byte frame after the hand-off", p.cfg.MaxFrameBytes+1))
	metadataRoundTrip(t, other, 8)
}

// bulkRecordSize is the size of each record bulkKeepsOrder produces.
const bulkRecordSize = 10 << 10

// createBulkTopic creates topic (1 partition, 3 replicas, records up to 4 MiB) and returns the
// address of its leader's listener on the proxy: a Produce elsewhere is refused (NOT_LEADER).
func createBulkTopic(t *testing.T, ctx context.Context, kadmin *kadm.Client, topic string) string {
	t.Helper()
	if _, err := kadmin.CreateTopic(ctx, 1, 3, map[string]*string{"max.message.bytes": kmsg.StringPtr("4194304")}, topic); err != nil {
		t.Fatal(err)
	}
	// The acks=-1 Produce bulkKeepsOrder sends waits for every in-sync replica, so wait until
	// all 3 followers have joined the ISR too: on a slow machine they lag the leader's
	// election, and the Produce would otherwise spend its timeout waiting for them.
	var leaderAddr string
	polltest.Eventually(t, 2*time.Minute, "a leader and 3 in-sync replicas for "+topic, func() (bool, string) {
		md, err := kadmin.Metadata(ctx, topic)
		if err != nil {
			return false, err.Error()
		}
		pd, ok := md.Topics[topic].Partitions[0]
		if !ok || pd.Leader < 0 || pd.Err != nil || len(pd.ISR) != 3 {
			return false, fmt.Sprintf("partition 0: %+v", pd)
		}
		for _, b := range md.Brokers {
			if b.NodeID == pd.Leader {
				leaderAddr = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
			}
		}
		return leaderAddr != "", fmt.Sprintf("leader %d not among the brokers %v", pd.Leader, md.Brokers)
	})
	return leaderAddr
}

// bulkValue is the value of the record with key i: its bytes tell where it was meant to land.
func bulkValue(i int) []byte {
	return bytes.Repeat([]byte{byte(i), byte(i >> 8), 0x5a}, bulkRecordSize/3)
}

// bulkBatch is a record batch of n records keyed first on, each key's number the offset it
// is meant to land at.
func bulkBatch(t *testing.T, first, n int) []byte {
	t.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte(strconv.Itoa(first + i)), Value: bulkValue(first + i)}
	}
	return kafkatest.RecordBatch(t, 0, kgo.NoCompression(), recs)
}

// bulkProduce is a Produce v9 with acks of bulkBatch(first, n) to topic's partition 0.
func bulkProduce(t *testing.T, topic string, acks int16, first, n int) *kmsg.ProduceRequest {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version = 9
	req.Acks = acks
	req.TimeoutMillis = 30000 // acks=-1 waits for the followers, slow on a loaded machine
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = bulkBatch(t, first, n)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// bulkRequests is the stream bulkKeepsOrder writes at once: Metadata requests (odd correlation
// ids) between Produce requests of counts records with acks=all, acks=0 and acks=1.
func bulkRequests(t *testing.T, topic string, counts []int) []byte {
	t.Helper()
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 9
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("bulk-test"))
	var out []byte
	out = append(out, f.AppendRequest(nil, md, 1)...)
	out = append(out, f.AppendRequest(nil, bulkProduce(t, topic, -1, 0, counts[0]), 2)...)
	out = append(out, f.AppendRequest(nil, md, 3)...)
	out = append(out, f.AppendRequest(nil, bulkProduce(t, topic, 0, counts[0], counts[1]), 4)...) // acks=0: no response
	out = append(out, f.AppendRequest(nil, md, 5)...)
	out = append(out, f.AppendRequest(nil, bulkProduce(t, topic, 1, counts[0]+counts[1], counts[2]), 6)...)
	out = append(out, f.AppendRequest(nil, md, 7)...)
	return out
}

// checkBulkResponses reads the responses to bulkRequests from conn: each in request order,
// none for the acks=0 Produce, and each Produce's records at the offsets their place in the
// stream gives them.
func checkBulkResponses(t *testing.T, conn net.Conn, counts []int) {
	t.Helper()
	for _, want := range []int32{1, 2, 3, 5, 6, 7} {
		fr := nextResponse(t, conn, want, time.Minute) // more than the Produce timeout
		if want != 2 && want != 6 {
			continue
		}
		resp := kmsg.NewPtrProduceResponse()
		resp.Version = 9
		if err := resp.ReadFrom(fr[9:]); err != nil { // size, correlation id, empty tag buffer
			t.Fatalf("Produce response %d: %v", want, err)
		}
		rp := resp.Topics[0].Partitions[0]
		wantBase := int64(0)
		if want == 6 {
			wantBase = int64(counts[0] + counts[1]) // after the acks=0 batch
		}
		if rp.ErrorCode != 0 || rp.BaseOffset != wantBase {
			t.Fatalf("Produce %d: error %d, base offset %d, want 0 and %d", want, rp.ErrorCode, rp.BaseOffset, wantBase)
		}
	}
}

// TestTakeBuffered: the bytes already read before a splice leave in stream order, whether
// they sit in the read buffer, in what gnet handed over, or in both.
func TestTakeBuffered(t *testing.T) {
	stream := make([]byte, 3*bulkReadBytes)
	for i := range stream {
		stream[i] = byte(i * 7)
	}
	for _, tc := range []struct{ read, max int }{
		{0, 100},                     // nothing through the buffer yet: gnet's bytes only
		{10, 100},                    // both
		{10, 2 * bulkReadBytes},      // both, up to the end of gnet's bytes
		{bulkReadBytes - 5, 3},       // the read buffer only
		{bulkReadBytes + 1, 1 << 30}, // past the first refill
	} {
		src := &bulkSource{prefix: stream[:2*bulkReadBytes]}
		br := bufio.NewReaderSize(src, bulkReadBytes)
		skip := make([]byte, tc.read)
		if _, err := io.ReadFull(br, skip); err != nil {
			t.Fatal(err)
		}
		got := takeBuffered(br, src, tc.max)
		want := stream[tc.read:min(tc.read+tc.max, 2*bulkReadBytes)]
		if !bytes.Equal(got, want) {
			t.Errorf("after reading %d, taking up to %d: got %d bytes, want %d in stream order", tc.read, tc.max, len(got), len(want))
		}
	}
}
