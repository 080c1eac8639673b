package mirrorconfig

import (
	"math"
	"strconv"
)

// ForcedTopicConfigs are set on every destination topic: it must accept
// every source batch as sent and keep it byte for byte.
//   - compression.type=producer, else the broker recompresses into its codec
//     (LogValidator: in-place assignment only when source codec == target);
//   - message.timestamp.type=CreateTime, else LogAppendTime overwrites the
//     batch max timestamp;
//   - message.timestamp.before.max.ms / after.max.ms = Long.MAX, else Kafka
//     4.x refuses source records older or newer than the skew limits (records
//     days in the past are normal for a mirror that starts late).
//
// They are forced whatever the source or topic.properties.exclude says; the
// data path sets them (fetcher.EnsureDestinationTopic) and the config sync
// (metasync) leaves them alone.
var ForcedTopicConfigs = map[string]string{
	"compression.type":                "producer",
	"message.timestamp.type":          "CreateTime",
	"message.timestamp.before.max.ms": strconv.FormatInt(math.MaxInt64, 10),
	"message.timestamp.after.max.ms":  strconv.FormatInt(math.MaxInt64, 10),
}

var defaultExcludedConfigs = map[string]bool{
	// topic.properties.exclude defaults.
	"leader.replication.throttled.replicas":   true,
	"follower.replication.throttled.replicas": true,
	"message.timestamp.type":                  true,
	"message.timestamp.before.max.ms":         true,
	"message.timestamp.after.max.ms":          true,
	"message.timestamp.difference.max.ms":     true,
	"unclean.leader.election.enable":          true,
	"min.insync.replicas":                     true,
	// Forced (see ForcedTopicConfigs).
	"compression.type": true,
	// Removed in Kafka 4.0: a 4.x destination refuses them as unknown, and
	// an older source may still carry them.
	"message.format.version":        true,
	"message.downconversion.enable": true,
}

// DefaultExcludedConfig reports whether a source topic config is not copied
// by default (whatever topic.properties.exclude adds).
func DefaultExcludedConfig(name string) bool { return defaultExcludedConfigs[name] }
