package enforcement

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kmirror's internals (issue 15, part 3): the state topic, the ownership
// group and the transactional ids of the copy pipeline are kmirror's own
// bookkeeping. Clients reach the destination through the proxy, so the proxy
// refuses their writes, deletes, config changes and group membership on
// those resources, whatever the broker's ACLs would allow: a deleted or
// overwritten state topic makes every instance forget its mirrors, a member
// joined to the group takes state partitions away from the instances, and a
// client that takes one of kmirror's transactional ids fences its writer.
// Reads stay possible (the broker's ACLs decide). Unlike the read-only rules
// these apply always, so the checks that run on every request of a hot key
// (Produce, Heartbeat, OffsetCommit) read one field in place and allocate
// nothing; only a request that names an internal resource is decoded.

// Internals names kmirror's resources on the destination.
type Internals struct {
	StateTopic string // e.g. __mirror_state
	// MarksTopic keeps lost mirrors' topics read-only (e.g.
	// __mirror_state_marks, coordinator/marks.go): it gets the state topic's
	// protection, since deleting both would make kmirror forget.
	MarksTopic string
	GroupID    string // e.g. kmirror-coordinators
	// TransactionalIDPrefix starts every transactional id kmirror uses
	// (coordinator.TransactionalIDPrefix).
	TransactionalIDPrefix string
}

// Refusal kinds, the reason label of the refusal metric.
const (
	RefusedStateTopic      = "state_topic"
	RefusedGroup           = "coordinator_group"
	RefusedTransactionalID = "transactional_id"
	RefusedTxnMarkers      = "txn_markers"
	RefusedUncleanElection = "unclean_election"
)

// Refusal says why the internals guard answered a request itself.
type Refusal struct {
	Kind     string // one of the Refused* constants
	Code     int16  // the error code the response carries
	Resource string // the topic, group or transactional id refused ("" when none is named)
	Reason   string // the message clients see
}

// internalKeys are the request keys the internals guard inspects.
var internalKeys = func() (k [128]bool) {
	for _, key := range []int16{0, 8, 11, 12, 13, 14, 19, 20, 21, 22, 24, 25, 26, 27, 28, 33, 37, 42, 43, 44, 47, 68} {
		k[key] = true
	}
	return k
}()

// InternalKey reports whether requests of key may touch kmirror's internals.
func InternalKey(key int16) bool {
	return key >= 0 && int(key) < len(internalKeys) && internalKeys[key]
}

// SetInternals installs the names of kmirror's resources; until then (and
// in a proxy without mirroring) nothing is refused on their account.
func (g *Guard) SetInternals(in Internals) { g.internals.Store(&in) }

// stateTopic reports whether name is one of kmirror's state topics (the
// string conversion in a comparison does not allocate).
func (in *Internals) stateTopic(name []byte) bool {
	return string(name) == in.StateTopic || (in.MarksTopic != "" && string(name) == in.MarksTopic)
}

func (in *Internals) stateTopicWhy(topic string) string {
	if !in.stateTopic([]byte(topic)) {
		return ""
	}
	return fmt.Sprintf("topic %q is kmirror's state topic: clients may read it, but only kmirror writes, deletes or reconfigures it "+
		"(change mirrors with kmirror mirrors; see docs/SECURITY.md, kmirror's internals)", topic)
}

func (in *Internals) groupWhy(group string) string {
	if group != in.GroupID {
		return ""
	}
	return fmt.Sprintf("group %q is the group kmirror instances share their work through: clients may describe it, but not join, "+
		"commit to or delete it (see docs/SECURITY.md, kmirror's internals)", group)
}

func (in *Internals) txnWhy(id string) string {
	if in.TransactionalIDPrefix == "" || len(id) < len(in.TransactionalIDPrefix) || id[:len(in.TransactionalIDPrefix)] != in.TransactionalIDPrefix {
		return ""
	}
	return fmt.Sprintf("transactional id %q has the prefix %q that kmirror's copy pipeline uses: clients may not use it "+
		"(it would fence kmirror's writer; see docs/SECURITY.md, kmirror's internals)", id, in.TransactionalIDPrefix)
}

// firstString returns the string (or nullable string) a request body starts
// with, in place; ok is false when the body is too short to hold it.
func firstString(body []byte, flexible bool) (s []byte, ok bool) {
	if flexible {
		n, w := binary.Uvarint(body)
		if w <= 0 || n > uint64(len(body)-w)+1 {
			return nil, false
		}
		if n == 0 {
			return nil, true // null
		}
		return body[w : w+int(n-1)], true
	}
	if len(body) < 2 {
		return nil, false
	}
	n := int16(binary.BigEndian.Uint16(body))
	if n < 0 {
		return nil, true // null
	}
	if int(n) > len(body)-2 {
		return nil, false
	}
	return body[2 : 2+int(n)], true
}

// hasPrefix reports whether s starts with prefix, without converting s.
func hasPrefix(s []byte, prefix string) bool {
	return prefix != "" && len(s) >= len(prefix) && string(s[:len(prefix)]) == prefix
}

// ProduceTouches reports, without allocating, whether a Produce request body
// may touch kmirror's internals: it uses a kmirror transactional id or
// names the state topic. A body that cannot be scanned (or addresses topics
// by id, v13+) counts as touching them, so that the full decode decides.
func (g *Guard) ProduceTouches(version int16, flexible bool, body []byte) bool {
	in := g.internals.Load()
	if in == nil {
		return false
	}
	touches, complete := in.scanProduce(version, flexible, body)
	return touches || !complete
}

// ProduceHeadClear reports whether the first bytes of a Produce request body
// (a large one, forwarded before it is complete) prove that the request
// does not touch kmirror's internals: no kmirror transactional id, and one
// topic, not the state topic, whose name is within head.
func (g *Guard) ProduceHeadClear(version int16, flexible bool, head []byte) bool {
	in := g.internals.Load()
	if in == nil {
		return true
	}
	if version >= 13 {
		return false
	}
	b := kbin.Reader{Src: head}
	if version >= 3 {
		if txn := readString(&b, flexible, true); hasPrefix(txn, in.TransactionalIDPrefix) {
			return false
		}
	}
	b.Int16()
	b.Int32()
	if arrayLen(&b, flexible) != 1 {
		return false
	}
	name := readString(&b, flexible, false)
	return b.Ok() && !in.stateTopic(name)
}

// scanProduce walks a Produce body's transactional id and topic names,
// skipping the record batches.
func (in *Internals) scanProduce(version int16, flexible bool, body []byte) (touches, complete bool) {
	if version >= 13 {
		return false, false
	}
	b := kbin.Reader{Src: body}
	if version >= 3 {
		if txn := readString(&b, flexible, true); hasPrefix(txn, in.TransactionalIDPrefix) {
			return true, true
		}
	}
	b.Int16()
	b.Int32()
	for topics := arrayLen(&b, flexible); topics > 0 && b.Ok(); topics-- {
		if name := readString(&b, flexible, false); b.Ok() && in.stateTopic(name) {
			return true, true
		}
		for parts := arrayLen(&b, flexible); parts > 0 && b.Ok(); parts-- {
			b.Int32()
			if flexible {
				b.Span(int(b.Uvarint()) - 1) // compact nullable bytes; null (0) is a negative span, refused
			} else {
				if n := b.Int32(); n > 0 {
					b.Span(int(n))
				}
			}
			skipTags(&b, flexible)
		}
		skipTags(&b, flexible)
	}
	return false, b.Ok()
}

func readString(b *kbin.Reader, flexible, nullable bool) []byte {
	var n int
	if flexible {
		n = int(b.Uvarint()) - 1
	} else {
		n = int(b.Int16())
	}
	if n < 0 {
		if !nullable {
			b.Span(-1) // marks the reader failed
		}
		return nil
	}
	return b.Span(n)
}

func arrayLen(b *kbin.Reader, flexible bool) int32 {
	if flexible {
		return b.CompactArrayLen()
	}
	return b.ArrayLen()
}

func skipTags(b *kbin.Reader, flexible bool) {
	if !flexible {
		return
	}
	for n := b.Uvarint(); n > 0 && b.Ok(); n-- {
		b.Uvarint()
		b.Span(int(b.Uvarint()))
	}
}

// ProduceInternals decides a Produce request that ProduceTouches flagged:
// a kmirror transactional id refuses all of it; partitions of the state
// topic are refused and the rest is forwarded (with the read-only rules
// applied in the same pass). A nil Refusal means nothing internal was named.
func (g *Guard) ProduceInternals(ctx context.Context, version int16, flexible bool, body []byte) (ProduceDecision, *Refusal, error) {
	in := g.internals.Load()
	if in == nil {
		d, err := g.FilterProduce(ctx, version, body)
		return d, nil, err
	}
	readOnly := func(string, int32) (int16, string) { return 0, "" }
	if set := g.set.Load(); !set.Empty() {
		readOnly = g.readOnlyWhy(set)
	}
	var ref *Refusal
	if version >= 3 {
		if txn, _ := firstString(body, flexible); in.txnWhy(string(txn)) != "" {
			ref = in.txnRefusal(string(txn))
			d, err := splitProduce(ctx, version, body, g.topicName, byPartition(func(string, int32) (int16, string) { return ref.Code, ref.Reason }))
			return d, ref, err
		}
	}
	d, err := splitProduce(ctx, version, body, g.topicName, byPartition(func(topic string, p int32) (int16, string) {
		if why := in.stateTopicWhy(topic); why != "" {
			if ref == nil {
				ref = in.stateTopicRefusal(topic)
			}
			return ref.Code, why
		}
		return readOnly(topic, p)
	}))
	return d, ref, err
}

// CheckInternals decides a request of an InternalKey other than Produce: a
// complete response when it touches kmirror's internals, or nil to go on
// (to the read-only rules, then upstream).
func (g *Guard) CheckInternals(ctx context.Context, key, version int16, flexible bool, body []byte) (kmsg.Response, *Refusal, error) {
	in := g.internals.Load()
	if in == nil || key == 0 || !InternalKey(key) {
		return nil, nil, nil
	}
	// Hot keys (every consumer group member sends them) start with the
	// group id or transactional id: look at it in place first.
	switch key {
	case 8, 11, 12, 13, 14, 47, 68:
		if s, ok := firstString(body, flexible); ok && string(s) != in.GroupID {
			return nil, nil, nil
		}
	case 22, 26:
		if s, ok := firstString(body, flexible); ok && !hasPrefix(s, in.TransactionalIDPrefix) {
			return nil, nil, nil
		}
	case 24:
		if s, ok := firstString(body, flexible); ok && version < 4 && !hasPrefix(s, in.TransactionalIDPrefix) {
			return nil, nil, nil
		}
	}
	req := kmsg.RequestForKey(key)
	req.SetVersion(version)
	if err := req.ReadFrom(body); err != nil {
		return nil, nil, fmt.Errorf("enforcement: decode %s v%d: %w", kmsg.NameForKey(key), version, err)
	}
	resp, ref := g.internalsAnswer(ctx, in, req)
	if resp == nil {
		return nil, nil, nil
	}
	resp.SetVersion(version)
	return resp, ref, nil
}

// internalsAnswer answers a decoded request that touches kmirror's internals with its own
// response type, or returns nil to let it go on.
func (g *Guard) internalsAnswer(ctx context.Context, in *Internals, req kmsg.Request) (kmsg.Response, *Refusal) {
	switch r := req.(type) {
	case *kmsg.CreateTopicsRequest, *kmsg.DeleteTopicsRequest, *kmsg.DeleteRecordsRequest, *kmsg.CreatePartitionsRequest,
		*kmsg.AlterConfigsRequest, *kmsg.IncrementalAlterConfigsRequest:
		return g.stateTopicAdmin(ctx, in, req)
	case *kmsg.WriteTxnMarkersRequest:
		return writeTxnMarkers(r)
	case *kmsg.ElectLeadersRequest:
		return g.electLeaders(r)
	case *kmsg.AddPartitionsToTxnRequest:
		return addPartitionsToTxn(r, in.txnRefusal)
	}
	if resp, ref := in.groupAnswer(req); resp != nil {
		return resp, ref
	}
	return in.txnAnswer(req)
}

// refuse answers req with its own response type, filled in by fill, when ref is set; a nil
// ref lets the request go on.
func refuse[R kmsg.Response](req kmsg.Request, ref *Refusal, fill func(R, *Refusal)) (kmsg.Response, *Refusal) {
	if ref == nil {
		return nil, nil
	}
	resp := req.ResponseKind().(R)
	fill(resp, ref)
	return resp, ref
}

func (in *Internals) groupRefusal(id string) *Refusal {
	if why := in.groupWhy(id); why != "" {
		return &Refusal{Kind: RefusedGroup, Code: kerr.GroupAuthorizationFailed.Code, Resource: id, Reason: why}
	}
	return nil
}

func (in *Internals) txnRefusal(id string) *Refusal {
	if why := in.txnWhy(id); why != "" {
		return &Refusal{Kind: RefusedTransactionalID, Code: kerr.TransactionalIDAuthorizationFailed.Code, Resource: id, Reason: why}
	}
	return nil
}

func (in *Internals) stateTopicRefusal(topic string) *Refusal {
	if why := in.stateTopicWhy(topic); why != "" {
		return &Refusal{Kind: RefusedStateTopic, Code: kerr.TopicAuthorizationFailed.Code, Resource: strings.Clone(topic), Reason: why} // topic may alias a request buffer
	}
	return nil
}

// txnOrGroupRefusal refuses a request that names a transactional id and a group (the
// offsets of a transaction) for either.
func (in *Internals) txnOrGroupRefusal(txn, group string) *Refusal {
	if ref := in.txnRefusal(txn); ref != nil {
		return ref
	}
	return in.groupRefusal(group)
}

// groupAnswer refuses membership of, commits to and deletion of kmirror's group.
func (in *Internals) groupAnswer(req kmsg.Request) (kmsg.Response, *Refusal) {
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		return refuse(r, in.groupRefusal(r.Group), func(resp *kmsg.JoinGroupResponse, ref *Refusal) {
			resp.ErrorCode, resp.Generation = ref.Code, -1
		})
	case *kmsg.SyncGroupRequest:
		return refuse(r, in.groupRefusal(r.Group), func(resp *kmsg.SyncGroupResponse, ref *Refusal) { resp.ErrorCode = ref.Code })
	case *kmsg.HeartbeatRequest:
		return refuse(r, in.groupRefusal(r.Group), func(resp *kmsg.HeartbeatResponse, ref *Refusal) { resp.ErrorCode = ref.Code })
	case *kmsg.LeaveGroupRequest: // v3+ names members: a client could remove kmirror's
		return refuse(r, in.groupRefusal(r.Group), func(resp *kmsg.LeaveGroupResponse, ref *Refusal) { resp.ErrorCode = ref.Code })
	case *kmsg.OffsetDeleteRequest:
		return refuse(r, in.groupRefusal(r.Group), func(resp *kmsg.OffsetDeleteResponse, ref *Refusal) { resp.ErrorCode = ref.Code })
	case *kmsg.ConsumerGroupHeartbeatRequest:
		return refuse(r, in.groupRefusal(r.Group), func(resp *kmsg.ConsumerGroupHeartbeatResponse, ref *Refusal) {
			resp.ErrorCode, resp.ErrorMessage = ref.Code, kmsg.StringPtr(ref.Reason)
		})
	case *kmsg.OffsetCommitRequest:
		return refuse(r, in.groupRefusal(r.Group), func(resp *kmsg.OffsetCommitResponse, ref *Refusal) {
			resp.Topics = mapSlice(r.Topics, func(t kmsg.OffsetCommitRequestTopic) kmsg.OffsetCommitResponseTopic {
				return kmsg.OffsetCommitResponseTopic{Topic: t.Topic, TopicID: t.TopicID,
					Partitions: mapSlice(t.Partitions, func(p kmsg.OffsetCommitRequestTopicPartition) kmsg.OffsetCommitResponseTopicPartition {
						return kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: ref.Code}
					})}
			})
		})
	case *kmsg.DeleteGroupsRequest:
		return in.deleteGroups(r)
	}
	return nil, nil
}

// deleteGroups refuses a DeleteGroups naming kmirror's group whole, like the admin requests
// (admin.go): nothing of a refused request is applied.
func (in *Internals) deleteGroups(r *kmsg.DeleteGroupsRequest) (kmsg.Response, *Refusal) {
	var ref *Refusal
	for _, gr := range r.Groups {
		if ref = in.groupRefusal(gr); ref != nil {
			break
		}
	}
	return refuse(r, ref, func(resp *kmsg.DeleteGroupsResponse, ref *Refusal) {
		for _, gr := range r.Groups {
			res := kmsg.NewDeleteGroupsResponseGroup()
			res.Group, res.ErrorCode = gr, ref.Code
			if gr != ref.Resource {
				res.ErrorCode = kerr.InvalidRequest.Code // a group of the caller's own: its code must not read as a missing ACL
			}
			resp.Groups = append(resp.Groups, res)
		}
	})
}

// txnAnswer refuses transactions under kmirror's transactional ids (AddPartitionsToTxn:
// addPartitionsToTxn).
func (in *Internals) txnAnswer(req kmsg.Request) (kmsg.Response, *Refusal) {
	switch r := req.(type) {
	case *kmsg.InitProducerIDRequest:
		if r.TransactionalID == nil {
			return nil, nil
		}
		return refuse(r, in.txnRefusal(*r.TransactionalID), func(resp *kmsg.InitProducerIDResponse, ref *Refusal) {
			resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = ref.Code, -1, -1
		})
	case *kmsg.EndTxnRequest:
		return refuse(r, in.txnRefusal(r.TransactionalID), func(resp *kmsg.EndTxnResponse, ref *Refusal) {
			resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = ref.Code, -1, -1
		})
	case *kmsg.AddOffsetsToTxnRequest:
		return refuse(r, in.txnOrGroupRefusal(r.TransactionalID, r.Group),
			func(resp *kmsg.AddOffsetsToTxnResponse, ref *Refusal) { resp.ErrorCode = ref.Code })
	case *kmsg.TxnOffsetCommitRequest:
		return refuse(r, in.txnOrGroupRefusal(r.TransactionalID, r.Group), func(resp *kmsg.TxnOffsetCommitResponse, ref *Refusal) {
			resp.Topics = mapSlice(r.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) kmsg.TxnOffsetCommitResponseTopic {
				return kmsg.TxnOffsetCommitResponseTopic{Topic: t.Topic,
					Partitions: mapSlice(t.Partitions, func(p kmsg.TxnOffsetCommitRequestTopicPartition) kmsg.TxnOffsetCommitResponseTopicPartition {
						return kmsg.TxnOffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: ref.Code}
					})}
			})
		})
	}
	return nil, nil
}

// stateTopicAdmin refuses creating, deleting, trimming, growing and reconfiguring kmirror's
// state topics.
func (g *Guard) stateTopicAdmin(ctx context.Context, in *Internals, req kmsg.Request) (kmsg.Response, *Refusal) {
	a := adminCheck{g: g, code: kerr.TopicAuthorizationFailed.Code, kind: "kmirror's state topic", why: in.stateTopicWhy,
		configWhy: func(resourceType int8, topic string, _ []string) string {
			if resourceType != topicResource {
				return ""
			}
			return in.stateTopicWhy(topic)
		}}
	resp, err := a.check(ctx, req, req.GetVersion())
	if err != nil || resp == nil {
		// Only DeleteTopics by id resolves names (err); an id that cannot be named is not
		// the state topic's as far as the guard can tell, and the broker answers it.
		return nil, nil
	}
	return resp, in.stateTopicRefusal(a.blocker)
}

// addPartitionsToTxn refuses v0-3 (a client's) for kmirror's transactional
// ids, and v4+ (brokers' verification batches) naming any of them.
func addPartitionsToTxn(r *kmsg.AddPartitionsToTxnRequest, txn func(string) *Refusal) (kmsg.Response, *Refusal) {
	resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	if r.Version >= 4 {
		for _, t := range r.Transactions {
			if ref := txn(t.TransactionalID); ref != nil {
				resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
				return resp, ref
			}
		}
		return nil, nil
	}
	ref := txn(r.TransactionalID)
	if ref == nil {
		return nil, nil
	}
	resp.Topics = mapSlice(r.Topics, func(t kmsg.AddPartitionsToTxnRequestTopic) kmsg.AddPartitionsToTxnResponseTopic {
		return kmsg.AddPartitionsToTxnResponseTopic{Topic: t.Topic,
			Partitions: mapSlice(t.Partitions, func(p int32) kmsg.AddPartitionsToTxnResponseTopicPartition {
				return kmsg.AddPartitionsToTxnResponseTopicPartition{Partition: p, ErrorCode: ref.Code}
			})}
	})
	return resp, ref
}

// writeTxnMarkers refuses every WriteTxnMarkers: only brokers send it (the
// transaction coordinator to partition leaders), and a client that could
// would commit or abort anyone's transaction, kmirror's included.
func writeTxnMarkers(r *kmsg.WriteTxnMarkersRequest) (kmsg.Response, *Refusal) {
	ref := &Refusal{Kind: RefusedTxnMarkers, Code: kerr.ClusterAuthorizationFailed.Code,
		Reason: "WriteTxnMarkers is sent by brokers only; kmirror does not forward it from clients"}
	resp := r.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	resp.Markers = mapSlice(r.Markers, func(m kmsg.WriteTxnMarkersRequestMarker) kmsg.WriteTxnMarkersResponseMarker {
		return kmsg.WriteTxnMarkersResponseMarker{ProducerID: m.ProducerID,
			Topics: mapSlice(m.Topics, func(t kmsg.WriteTxnMarkersRequestMarkerTopic) kmsg.WriteTxnMarkersResponseMarkerTopic {
				return kmsg.WriteTxnMarkersResponseMarkerTopic{Topic: t.Topic,
					Partitions: mapSlice(t.Partitions, func(p int32) kmsg.WriteTxnMarkersResponseMarkerTopicPartition {
						return kmsg.WriteTxnMarkersResponseMarkerTopicPartition{Partition: p, ErrorCode: ref.Code}
					})}
			})}
	})
	return resp, ref
}

// electLeaders refuses unclean elections that include a read-only mirror
// topic: an unclean leader may lack records the mirror already copied, and
// the destination log would then no longer match the source offset for
// offset. Preferred elections pass.
func (g *Guard) electLeaders(r *kmsg.ElectLeadersRequest) (kmsg.Response, *Refusal) {
	const unclean = 1
	set := g.set.Load()
	if r.ElectionType != unclean || set.Empty() {
		return nil, nil
	}
	resp := r.ResponseKind().(*kmsg.ElectLeadersResponse)
	if r.Topics == nil { // every partition of the cluster, mirror topics included
		resp.ErrorCode = g.opts.ErrorCode
		return resp, &Refusal{Kind: RefusedUncleanElection, Code: g.opts.ErrorCode,
			Reason: "an unclean election of every partition includes read-only mirror topics; name the topics, without the mirror topics"}
	}
	var ref *Refusal
	for _, t := range r.Topics {
		if why := set.refusal(t.Topic, -1); why != "" {
			ref = &Refusal{Kind: RefusedUncleanElection, Code: g.opts.ErrorCode, Resource: t.Topic,
				Reason: "unclean leader election refused: it may lose records the mirror copied; " + why}
			break
		}
	}
	if ref == nil {
		return nil, nil
	}
	for _, t := range r.Topics {
		rt := kmsg.NewElectLeadersResponseTopic()
		rt.Topic = t.Topic
		msg := ref.Reason
		if t.Topic != ref.Resource && set.refusal(t.Topic, -1) == "" {
			msg = fmt.Sprintf("not applied to %q: the same request names read-only mirror topic %q", t.Topic, ref.Resource)
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewElectLeadersResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.ErrorMessage = p, ref.Code, kmsg.StringPtr(msg)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, ref
}
