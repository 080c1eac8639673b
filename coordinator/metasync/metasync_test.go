package metasync

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/aclfilter"
)

func cfg(key, value string, source kmsg.ConfigSource) kadm.Config {
	return kadm.Config{Key: key, Value: &value, Source: source}
}

const (
	dyn = kmsg.ConfigSourceDynamicTopicConfig
	def = kmsg.ConfigSourceDefaultConfig
)

func TestExcludedConfig(t *testing.T) {
	excluded := ExcludedConfig(map[string]bool{"retention.bytes": true})
	for name, want := range map[string]bool{
		"retention.bytes":                 true, // the mirror's topic.properties.exclude
		"min.insync.replicas":             true, // default exclusion
		"compression.type":                true, // forced
		"message.timestamp.after.max.ms":  true, // forced
		"message.timestamp.before.max.ms": true,
		"mirror.name":                     true,
		"retention.ms":                    false,
		"cleanup.policy":                  false,
	} {
		if got := excluded(name); got != want {
			t.Errorf("excluded(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestConfigChanges(t *testing.T) {
	excluded := ExcludedConfig(nil)
	src := []kadm.Config{
		cfg("retention.ms", "600000", dyn),            // differs: set
		cfg("max.message.bytes", "2000000", dyn),      // missing on the destination: set
		cfg("segment.bytes", "1048576", dyn),          // equal: nothing
		cfg("cleanup.policy", "delete", def),          // a default, not the topic's own
		cfg("min.insync.replicas", "2", dyn),          // excluded
		cfg("compression.type", "gzip", dyn),          // forced to producer on the destination
		{Key: "secret", Sensitive: true, Source: dyn}, // value never returned
	}
	dst := []kadm.Config{
		cfg("retention.ms", "-1", dyn),
		cfg("segment.bytes", "1048576", dyn),
		cfg("delete.retention.ms", "1000", dyn),  // the source no longer sets it: delete
		cfg("min.insync.replicas", "1", dyn),     // the destination's own: kept
		cfg("compression.type", "producer", dyn), // forced: kept
		cfg("message.timestamp.type", "CreateTime", dyn),
		{Key: "other-secret", Sensitive: true, Source: dyn},
	}
	got := ConfigChanges(src, dst, excluded)
	v1, v2 := "2000000", "600000"
	want := []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v1},
		{Op: kadm.SetConfig, Name: "retention.ms", Value: &v2},
		{Op: kadm.DeleteConfig, Name: "delete.retention.ms"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("changes %s, want %s", describeChanges(got), describeChanges(want))
	}
	if got := ConfigChanges(src, append(dst[:0:0], cfg("retention.ms", "600000", dyn), cfg("max.message.bytes", "2000000", dyn), cfg("segment.bytes", "1048576", dyn)), excluded); len(got) != 0 {
		t.Fatalf("a destination in step gets %s", describeChanges(got))
	}
}

func TestSelectedAndMissing(t *testing.T) {
	rules, err := aclfilter.Parse("TOPIC;orders.*,GROUP;*;READ")
	if err != nil {
		t.Fatal(err)
	}
	acl := func(rt kmsg.ACLResourceType, name string, pt kmsg.ACLResourcePatternType, op kmsg.ACLOperation) aclfilter.Binding {
		return aclfilter.Binding{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: "User:alice", Host: "*",
			Operation: op, Permission: kmsg.ACLPermissionTypeAllow}
	}
	ordersRead := acl(kmsg.ACLResourceTypeTopic, "orders", kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLOperationRead)
	ordersPrefix := acl(kmsg.ACLResourceTypeTopic, "orders-", kmsg.ACLResourcePatternTypePrefixed, kmsg.ACLOperationWrite)
	groupRead := acl(kmsg.ACLResourceTypeGroup, "g1", kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLOperationRead)
	groupDescribe := acl(kmsg.ACLResourceTypeGroup, "g1", kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLOperationDescribe)
	payments := acl(kmsg.ACLResourceTypeTopic, "payments", kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLOperationRead)
	cluster := acl(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLOperationAlter)

	sel := Selected([]aclfilter.Binding{payments, groupDescribe, ordersRead, cluster, ordersPrefix, groupRead}, rules)
	if len(sel) != 3 {
		t.Fatalf("selected %v, want the two orders ACLs and the group READ", sel)
	}
	// The destination already has one; its own ACL (payments) is irrelevant
	// and never deleted: Missing only lists what to create.
	missing := Missing(sel, []aclfilter.Binding{ordersRead, payments})
	if len(missing) != 2 || missing[0] == ordersRead || missing[1] == ordersRead {
		t.Fatalf("missing %v", missing)
	}
}
