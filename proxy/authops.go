package proxy

import (
	"errors"
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// What a principal may do, as the destination's own authoriser says (docs/SECURITY.md, "Who
// may call kmirror's RPCs"). The proxy asks with a Metadata v10 request on the client's own
// upstream connection (authz.go), so the broker answers for the client's principal;
// include_cluster_authorized_operations and include_topic_authorized_operations return
// Kafka's 32-bit fields, bit n set when AclOperation n is allowed. Metadata v10 is the newest
// version that still carries the cluster field (KIP-700 moved it to DescribeCluster in v11)
// and gives cluster and topic operations in one round trip.

// aclOp is Kafka's AclOperation code, the bit position in an authorised-operations field.
type aclOp int8

const (
	opCreate   aclOp = 5
	opAlter    aclOp = 7
	opDescribe aclOp = 8
)

var aclOpNames = map[aclOp]string{opCreate: "CREATE", opAlter: "ALTER", opDescribe: "DESCRIBE"}

func (o aclOp) String() string {
	if name, ok := aclOpNames[o]; ok {
		return name
	}
	return fmt.Sprintf("OPERATION_%d", int8(o))
}

// opsNotReported is the schema default of an authorised-operations field: the broker did
// not evaluate it. It allows nothing.
const opsNotReported = math.MinInt32

// authzMetadataVersion is the Metadata version of the proxy's question (see above).
const authzMetadataVersion = 10

// authorizedOps is the broker's answer for one principal.
type authorizedOps struct {
	cluster int32            // bit field; opsNotReported: unknown, nothing allowed
	topics  map[string]int32 // topics the principal may describe -> their operations
}

func allows(field int32, op aclOp) bool {
	return field != opsNotReported && field&(1<<uint(op)) != 0
}

func (o *authorizedOps) clusterAllows(op aclOp) bool { return allows(o.cluster, op) }

// topicAllows reports op on topic; a topic the broker did not list (not describable, or
// absent) allows nothing.
func (o *authorizedOps) topicAllows(topic string, op aclOp) bool {
	f, ok := o.topics[topic]
	return ok && allows(f, op)
}

// authzMetadataRequest is the question: cluster operations, and the operations on topics
// (nil: every topic; empty: none). Auto topic creation is off: asking must create nothing.
func authzMetadataRequest(topics []string) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(authzMetadataVersion)
	req.AllowAutoTopicCreation = false
	req.IncludeClusterAuthorizedOperations = true
	req.IncludeTopicAuthorizedOperations = true
	if topics != nil {
		req.Topics = make([]kmsg.MetadataRequestTopic, len(topics))
		for i, t := range topics {
			req.Topics[i].Topic = kmsg.StringPtr(t)
		}
	}
	return req
}

// decodeAuthorizedOps reads the broker's answer: a whole Metadata v10 response frame
// (size prefix included). Topics with an error (TOPIC_AUTHORIZATION_FAILED,
// UNKNOWN_TOPIC_OR_PARTITION) are left out: they allow nothing.
func decodeAuthorizedOps(frame []byte) (authorizedOps, error) {
	_, body, err := splitResponse(frame, responseHeaderVersion(3, authzMetadataVersion))
	if err != nil {
		return authorizedOps{}, fmt.Errorf("authorised operations: %w", err)
	}
	resp := kmsg.NewPtrMetadataResponse()
	resp.SetVersion(authzMetadataVersion)
	if err := resp.ReadFrom(body); err != nil {
		return authorizedOps{}, fmt.Errorf("authorised operations: decoding Metadata v%d response: %w", authzMetadataVersion, err)
	}
	out := authorizedOps{cluster: resp.AuthorizedOperations, topics: make(map[string]int32, len(resp.Topics))}
	for _, t := range resp.Topics {
		if t.ErrorCode == 0 && t.Topic != nil {
			out.topics[*t.Topic] = t.AuthorizedOperations
		}
	}
	return out, nil
}

// errOpsUnavailable: the broker could not be asked (connection gone, undecodable answer).
var errOpsUnavailable = errors.New("the destination's authoriser could not be asked")
