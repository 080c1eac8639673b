package proxy

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/protocol"
)

func metadataFrame(t testing.TB, cluster int32, topics map[string]int32, refused ...string) []byte {
	t.Helper()
	resp := kmsg.NewPtrMetadataResponse()
	resp.SetVersion(authzMetadataVersion)
	resp.AuthorizedOperations = cluster
	for name, ops := range topics {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic, mt.AuthorizedOperations = kmsg.StringPtr(name), ops
		resp.Topics = append(resp.Topics, mt)
	}
	for _, name := range refused {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic, mt.ErrorCode, mt.AuthorizedOperations = kmsg.StringPtr(name), 29, 1<<opDescribe // an error wins over the field
		resp.Topics = append(resp.Topics, mt)
	}
	return appendResponseFrame(nil, authzCorrID, responseHeaderVersion(3, authzMetadataVersion), resp.AppendTo(nil))
}

func opBits(ops ...aclOp) int32 {
	var f int32
	for _, o := range ops {
		f |= 1 << uint(o)
	}
	return f
}

func TestDecodeAuthorizedOps(t *testing.T) {
	ops, err := decodeAuthorizedOps(metadataFrame(t, opBits(opDescribe), map[string]int32{"t1": opBits(opDescribe, 3)}, "t2"))
	if err != nil {
		t.Fatal(err)
	}
	if !ops.clusterAllows(opDescribe) || ops.clusterAllows(opAlter) {
		t.Fatalf("cluster ops %b", ops.cluster)
	}
	if !ops.topicAllows("t1", opDescribe) || ops.topicAllows("t2", opDescribe) || ops.topicAllows("t3", opDescribe) {
		t.Fatalf("topic ops %v", ops.topics)
	}
	notReported, err := decodeAuthorizedOps(metadataFrame(t, opsNotReported, nil))
	if err != nil {
		t.Fatal(err)
	}
	for op := aclOp(0); op < 32; op++ {
		if notReported.clusterAllows(op) {
			t.Fatalf("a field the broker did not report allows %s", op)
		}
	}
	if _, err := decodeAuthorizedOps([]byte{0, 0, 0, 4, 1, 2, 3, 4, 5}); err == nil {
		t.Fatal("a truncated response decoded")
	}
}

// FuzzAuthorizedOps: any bytes as the broker's answer never panic, and whatever decodes
// allows an operation only where its bit is set.
func FuzzAuthorizedOps(f *testing.F) {
	f.Add(metadataFrame(f, opBits(opAlter, opDescribe), map[string]int32{"a": opBits(opDescribe)}))
	f.Add(metadataFrame(f, opsNotReported, nil, "x"))
	f.Add([]byte{0, 0, 0, 5, 0xff, 0x94, 0x93, 0, 0})
	f.Fuzz(func(t *testing.T, frame []byte) {
		ops, err := decodeAuthorizedOps(frame)
		if err != nil {
			return
		}
		for op := aclOp(0); op < 32; op++ {
			if ops.clusterAllows(op) && (ops.cluster == opsNotReported || ops.cluster&(1<<uint(op)) == 0) {
				t.Fatalf("cluster allows %s with field %b", op, ops.cluster)
			}
		}
	})
}

func TestDecide(t *testing.T) {
	admin := &authorizedOps{cluster: opBits(opAlter, opDescribe, opCreate)}
	alice := &authorizedOps{cluster: 0, topics: map[string]int32{"t1": opBits(opDescribe, 3, 4)}}
	alterOnly := &authorizedOps{cluster: opBits(opAlter, opDescribe)}
	for _, c := range []struct {
		name     string
		key      int16
		subj     subject
		ops      *authorizedOps
		code     int16
		message  string
		filtered bool
	}{
		{"admin fails over", protocol.KeyRemoveTopicsFromMirror, subject{mirror: "m"}, admin, 0, "", false},
		{"alice fails over", protocol.KeyRemoveTopicsFromMirror, subject{mirror: "m", topics: []string{"t1"}}, alice, 144,
			"ALTER on CLUSTER is required to fail over mirror m (principal User:alice)", false},
		{"add without CREATE", protocol.KeyAddTopicsToMirror, subject{mirror: "m"}, alterOnly, 144,
			"CREATE on CLUSTER is required to add topics to mirror m (an add creates the destination topics) (principal User:alice)", false},
		{"alice describes all", protocol.KeyDescribeMirrors, subject{}, alice, 0, "", true},
		{"alice reads t1", protocol.KeyLastMirroredOffsets, subject{mirror: "m", topics: []string{"t1"}}, alice, 0, "", false},
		{"alice reads t2", protocol.KeyReadMirrorState, subject{mirror: "m", topics: []string{"t1", "t2"}}, alice, 29,
			"DESCRIBE on CLUSTER, or DESCRIBE on TOPIC t2, is required to read the state of mirror m (principal User:alice)", false},
		{"admin lists", protocol.KeyListMirrors, subject{}, admin, 0, "", false},
	} {
		d := decide(c.key, mirrorRequirements[c.key], c.subj, "User:alice", c.ops)
		if d.allowed != (c.code == 0) || d.code != c.code || d.message != c.message || (d.filter != nil) != c.filtered {
			t.Errorf("%s: got allowed=%v code=%d filter=%v %q; want code %d filter=%v %q", c.name, d.allowed, d.code, d.filter != nil, d.message, c.code, c.filtered, c.message)
		}
	}
	for key, req := range mirrorRequirements {
		if !req.never && len(req.cluster) == 0 {
			t.Errorf("%s requires nothing", protocol.APIName(key))
		}
	}
	for _, api := range protocol.MirrorAPIs() {
		if _, ok := mirrorRequirements[api.Key]; !ok {
			t.Errorf("%s has no requirement: it would be answered to anyone", api.Name)
		}
	}
}

func TestFilterTopics(t *testing.T) {
	keep := func(t string) bool { return strings.HasPrefix(t, "ok") }
	d := &protocol.DescribeMirrorsResponse{Mirrors: []protocol.DescribeMirrorsResponseMirror{
		{Name: "m1", Topics: []protocol.DescribeMirrorsResponseTopic{{Name: "ok1"}, {Name: "no1"}}, Groups: []protocol.DescribeMirrorsResponseGroup{{Name: "g"}}},
		{Name: "m2", Topics: []protocol.DescribeMirrorsResponseTopic{{Name: "no2"}}},
	}, Routes: []protocol.DescribeMirrorsResponseRoute{{Name: "app", Mirror: "m1"}}}
	filterTopics(d, keep, true)
	if len(d.Mirrors) != 1 || d.Mirrors[0].Name != "m1" || len(d.Mirrors[0].Topics) != 1 || d.Mirrors[0].Groups != nil {
		t.Fatalf("describe filtered to %+v", d.Mirrors)
	}
	if d.Routes != nil {
		t.Fatalf("a principal without DESCRIBE on CLUSTER sees routes: %+v", d.Routes)
	}
	l := &protocol.ListMirrorsResponse{Mirrors: []protocol.ListMirrorsResponseMirror{
		{Name: "m1", TopicCount: 2, TopicNames: []string{"ok1", "no1"}}, {Name: "m2", TopicCount: 1, TopicNames: []string{"no2"}},
	}}
	filterTopics(l, keep, false)
	if len(l.Mirrors) != 1 || l.Mirrors[0].TopicCount != 1 || l.Mirrors[0].TopicNames != nil {
		t.Fatalf("list filtered to %+v", l.Mirrors)
	}
}
