package protocol

import "github.com/twmb/franz-go/pkg/kmsg"

// wireMessage is what every mirror request and response can do; the tests
// treat requests and responses alike through it.
type wireMessage interface {
	Key() int16
	AppendTo([]byte) []byte
	ReadFrom([]byte) error
}

type roundTripCase struct {
	name string
	msg  wireMessage
}

func strp(s string) *string { return &s }

// tagsOf builds unknown tags from tag/value pairs.
func tagsOf(kv ...any) kmsg.Tags {
	var t kmsg.Tags
	for i := 0; i < len(kv); i += 2 {
		t.Set(uint32(kv[i].(int)), []byte(kv[i+1].(string)))
	}
	return t
}

var uuid1 = [16]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

// roundTripCases holds, for every mirror key, zero-valued and fully
// populated requests and responses: unknown tags at every struct level,
// null and empty nullable strings, negative numbers, and known tagged
// fields. Empty arrays are nil: that is how they decode.
func roundTripCases() []roundTripCase {
	return []roundTripCase{
		{"CreateMirrorRequest/zero", &CreateMirrorRequest{}},
		{"CreateMirrorRequest/full", &CreateMirrorRequest{
			MirrorName: "dr-east",
			Configs: []CreateMirrorRequestConfig{
				{Name: "bootstrap.servers", Value: strp("src-1:9092,src-2:9092")},
				{Name: "topics.include", Value: strp("")},
				{Name: "sasl.jaas.config", Value: nil, UnknownTags: tagsOf(3, "x")},
			},
			RecoverState: true,
			UnknownTags:  tagsOf(9, "future", 200, ""),
		}},
		{"CreateMirrorResponse/zero", &CreateMirrorResponse{}},
		{"CreateMirrorResponse/full", &CreateMirrorResponse{ThrottleMillis: 250, ErrorCode: 136,
			ErrorMessage: strp("mirror \"dr-east\" already exists"), UnknownTags: tagsOf(1, "\x00\x01")}},

		{"AddTopicsToMirrorRequest/zero", &AddTopicsToMirrorRequest{}},
		{"AddTopicsToMirrorRequest/full", &AddTopicsToMirrorRequest{
			MirrorName: "dr-east",
			Topics: []AddTopicsToMirrorRequestTopic{
				{Name: "orders", TopicID: uuid1, NumPartitions: 12},
				{Name: "payments", NumPartitions: -1, UnknownTags: tagsOf(0, "z")},
			},
			IncludePatterns: []string{"orders\\..*", ""},
			ExcludePatterns: []string{"__.*"},
			UnknownTags:     tagsOf(2, "two", 70, "seventy"),
		}},
		{"AddTopicsToMirrorRequest/only-exclude", &AddTopicsToMirrorRequest{MirrorName: "m", ExcludePatterns: []string{"x"}}},
		{"AddTopicsToMirrorResponse/zero", &AddTopicsToMirrorResponse{}},
		{"AddTopicsToMirrorResponse/full", &AddTopicsToMirrorResponse{ThrottleMillis: -1, ErrorCode: 0, Topics: []TopicResult{
			{Name: "orders"},
			{Name: "payments", ErrorCode: 138, ErrorMessage: strp("already mirrored by \"dr-west\""), UnknownTags: tagsOf(5, "five")},
			{Name: "", ErrorCode: 146, ErrorMessage: strp("")},
		}}},

		{"RemoveTopicsFromMirrorRequest/zero", &RemoveTopicsFromMirrorRequest{}},
		{"RemoveTopicsFromMirrorRequest/full", &RemoveTopicsFromMirrorRequest{MirrorName: "dr-east",
			Topics:   []TopicName{{Name: "orders"}, {Name: "payments", UnknownTags: tagsOf(1, "1")}},
			Patterns: []string{"orders\\..*"}, UnknownTags: tagsOf(1, "one")}},
		{"RemoveTopicsFromMirrorResponse/zero", &RemoveTopicsFromMirrorResponse{}},
		{"RemoveTopicsFromMirrorResponse/full", &RemoveTopicsFromMirrorResponse{ErrorCode: 137, ErrorMessage: strp("no mirror"),
			Topics: []TopicResult{{Name: "orders", ErrorCode: 139, ErrorMessage: strp("not in mirror")}}, UnknownTags: tagsOf(0, "")}},

		{"LastMirroredOffsetsRequest/zero", &LastMirroredOffsetsRequest{}},
		{"LastMirroredOffsetsRequest/full", &LastMirroredOffsetsRequest{MirrorName: "dr-east", ClusterID: "Xy9-cluster",
			Topics:      []TopicPartitions{{Name: "orders", Partitions: []int32{0, 1, 2, -1, 2147483647}}, {Name: "empty"}},
			UnknownTags: tagsOf(4, "4")}},
		{"LastMirroredOffsetsResponse/zero", &LastMirroredOffsetsResponse{}},
		{"LastMirroredOffsetsResponse/full", &LastMirroredOffsetsResponse{ThrottleMillis: 1,
			Topics: []LastMirroredOffsetsResponseTopic{{Name: "orders", Partitions: []LastMirroredOffsetsResponsePartition{
				{Partition: 0, LastMirroredOffset: 1 << 40},
				{Partition: 1, LastMirroredOffset: -1, ErrorCode: 3, UnknownTags: tagsOf(8, "8")},
			}, UnknownTags: tagsOf(7, "7")}}}},

		{"ListMirrorsRequest/zero", &ListMirrorsRequest{}},
		{"ListMirrorsRequest/full", &ListMirrorsRequest{IncludeTopicNames: true, UnknownTags: tagsOf(0, "zero")}},
		{"ListMirrorsResponse/zero", &ListMirrorsResponse{}},
		{"ListMirrorsResponse/full", &ListMirrorsResponse{Mirrors: []ListMirrorsResponseMirror{
			{Name: "dr-east", SourceBootstrap: "src-1:9092", SourceClusterID: "abc", TopicCount: 2, TopicNames: []string{"orders", "payments"}},
			{Name: "migration", SourceBootstrap: "old:9092", TopicCount: 0, UnknownTags: tagsOf(3, "")},
		}}},

		{"DescribeMirrorsRequest/zero", &DescribeMirrorsRequest{}},
		{"DescribeMirrorsRequest/full", &DescribeMirrorsRequest{MirrorNames: []string{"dr-east", "nope"}, UnknownTags: tagsOf(6, "6")}},
		{"DescribeMirrorsResponse/zero", &DescribeMirrorsResponse{}},
		{"DescribeMirrorsResponse/full", &DescribeMirrorsResponse{ThrottleMillis: 5, Mirrors: []DescribeMirrorsResponseMirror{
			{Name: "dr-east", Topics: []DescribeMirrorsResponseTopic{{Name: "orders", Partitions: []DescribeMirrorsResponsePartition{
				{Partition: 0, State: "MIRRORING", SourceHighWatermark: 100, DestinationHighWatermark: 90, Lag: 10, LastMirroredOffset: -1,
					RecordsAtRisk: 10, AtRiskAgeMs: 4321},
				{Partition: 1, State: "FAILED", SourceHighWatermark: -1, DestinationHighWatermark: 7, Lag: -1, LastMirroredOffset: 6,
					RetryAttempt: 3, ErrorMessage: strp("offset mismatch: expected 7, broker assigned 8"), RecordsAtRisk: -1, AtRiskAgeMs: -1,
					UnknownTags: tagsOf(5, "p")},
				{Partition: 2, State: "MIRRORING", SourceHighWatermark: 5, DestinationHighWatermark: 5, Lag: 0, LastMirroredOffset: -1},
			}, UnknownTags: tagsOf(2, "t")}},
				Groups: []DescribeMirrorsResponseGroup{
					{Name: "billing", State: "SYNCED", LastSyncAgeMs: 1200, Partitions: 6},
					{Name: "web", State: "ACTIVE", LastSyncAgeMs: -1, Message: strp("has members on the destination"), UnknownTags: tagsOf(4, "g")},
				},
				Syncs: []DescribeMirrorsResponseSync{
					{Job: "groups", LastSuccessAgeMs: 1200, LastRunAgeMs: 1200, Message: strp("2 groups tracked")},
					{Job: "acls", LastSuccessAgeMs: -1, LastRunAgeMs: 5, ErrorMessage: strp("the destination has no authorizer"), UnknownTags: tagsOf(5, "s")},
				},
				Clusters:    strp("source Kafka 3.6, destination Kafka 4.4 (transaction.version 2): exactly-once"),
				UnknownTags: tagsOf(3, "m")},
			{Name: "nope", ErrorCode: 137, ErrorMessage: strp("mirror \"nope\" does not exist")},
		}}},

		{"ReadMirrorStateRequest/zero", &ReadMirrorStateRequest{}},
		{"ReadMirrorStateRequest/full", &ReadMirrorStateRequest{MirrorName: "dr-east",
			Topics: []TopicPartitions{{Name: "orders", Partitions: []int32{3}, UnknownTags: tagsOf(1, "x")}}}},
		{"ReadMirrorStateResponse/zero", &ReadMirrorStateResponse{}},
		{"ReadMirrorStateResponse/full", &ReadMirrorStateResponse{Topics: []ReadMirrorStateResponseTopic{{Name: "orders",
			Partitions: []ReadMirrorStateResponsePartition{
				{Partition: 3, State: MirrorStateFailed, PreviousState: MirrorStateMirroring, RetryAttempt: -1, LastMirroredOffset: 41,
					ErrorMessage: strp("non-retriable")},
				{Partition: 4, State: MirrorStateUnknown, PreviousState: MirrorState(99), LastMirroredOffset: -1, ErrorCode: 3},
			}}}, UnknownTags: tagsOf(10, "ten")}},

		{"WriteMirrorStateRequest/zero", &WriteMirrorStateRequest{}},
		{"WriteMirrorStateRequest/full", &WriteMirrorStateRequest{MirrorName: "dr-east", Topics: []WriteMirrorStateRequestTopic{{Name: "orders",
			Partitions: []WriteMirrorStateRequestPartition{
				{Partition: 0, State: MirrorStateStopping, LastMirroredOffset: -1},
				{Partition: 1, State: MirrorStateStopped, LastMirroredOffset: 1234, UnknownTags: tagsOf(0, "0")},
			}}}}},
		{"WriteMirrorStateResponse/zero", &WriteMirrorStateResponse{}},
		{"WriteMirrorStateResponse/full", &WriteMirrorStateResponse{ErrorCode: 16, ErrorMessage: strp("moved"),
			Topics: []WriteMirrorStateResponseTopic{{Name: "orders", Partitions: []WriteMirrorStateResponsePartition{{Partition: 1, ErrorCode: 145}}}}}},

		{"PauseMirrorTopicsRequest/zero", &PauseMirrorTopicsRequest{}},
		{"PauseMirrorTopicsRequest/full", &PauseMirrorTopicsRequest{MirrorName: "dr-east", Topics: []TopicName{{Name: "orders"}}, UnknownTags: tagsOf(1, "1")}},
		{"PauseMirrorTopicsResponse/zero", &PauseMirrorTopicsResponse{}},
		{"PauseMirrorTopicsResponse/full", &PauseMirrorTopicsResponse{Topics: []TopicResult{{Name: "orders", ErrorCode: 142, ErrorMessage: strp("stopping")}}}},

		{"ResumeMirrorTopicsRequest/zero", &ResumeMirrorTopicsRequest{}},
		{"ResumeMirrorTopicsRequest/full", &ResumeMirrorTopicsRequest{MirrorName: "dr-east", Topics: []TopicName{{Name: "orders"}, {Name: "b"}}}},
		{"ResumeMirrorTopicsResponse/zero", &ResumeMirrorTopicsResponse{}},
		{"ResumeMirrorTopicsResponse/full", &ResumeMirrorTopicsResponse{ThrottleMillis: 2, Topics: []TopicResult{{Name: "orders", ErrorCode: 141, ErrorMessage: nil}},
			UnknownTags: tagsOf(100000, "big tag")}},

		{"DeleteMirrorRequest/zero", &DeleteMirrorRequest{}},
		{"DeleteMirrorRequest/full", &DeleteMirrorRequest{MirrorName: "dr-east", UnknownTags: tagsOf(0, "a", 1, "b")}},
		{"DeleteMirrorResponse/zero", &DeleteMirrorResponse{}},
		{"DeleteMirrorResponse/full", &DeleteMirrorResponse{ErrorCode: 143, ErrorMessage: strp("topics not STOPPED: orders")}},
		{"SwitchRouteRequest/zero", &SwitchRouteRequest{}},
		{"SwitchRouteRequest/full", &SwitchRouteRequest{RouteName: "payments", Force: true, UnknownTags: tagsOf(2, "z")}},
		{"SwitchRouteResponse/zero", &SwitchRouteResponse{}},
		{"SwitchRouteResponse/full", &SwitchRouteResponse{ThrottleMillis: 1, ErrorCode: 145, ErrorMessage: strp("a switch of the route is in progress"), Attempt: 3}},
	}
}
