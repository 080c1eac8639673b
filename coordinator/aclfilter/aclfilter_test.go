package aclfilter

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func binding(t kmsg.ACLResourceType, name string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType, principal string) Binding {
	return Binding{ResourceType: t, ResourceName: name, PatternType: kmsg.ACLResourcePatternTypeLiteral,
		Principal: principal, Host: "*", Operation: op, Permission: perm}
}

var (
	aliceReadsOrders = binding(kmsg.ACLResourceTypeTopic, "orders", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow, "User:alice")
	bobWritesOrders  = binding(kmsg.ACLResourceTypeTopic, "orders-eu", kmsg.ACLOperationWrite, kmsg.ACLPermissionTypeDeny, "User:bob")
	aliceGroup       = binding(kmsg.ACLResourceTypeGroup, "consumer-1", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow, "User:alice")
	bobTxn           = binding(kmsg.ACLResourceTypeTransactionalId, "tx-1", kmsg.ACLOperationWrite, kmsg.ACLPermissionTypeAllow, "User:bob")
	clusterAlter     = binding(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationAlter, kmsg.ACLPermissionTypeAllow, "User:alice")
)

func TestRulesMatch(t *testing.T) {
	for _, c := range []struct {
		rules string
		match []Binding
		miss  []Binding
	}{
		// The proposal's examples.
		{"TOPIC;orders.*", []Binding{aliceReadsOrders, bobWritesOrders}, []Binding{aliceGroup, bobTxn}},
		{"*;*;*;*;User:alice", []Binding{aliceReadsOrders, aliceGroup}, []Binding{bobWritesOrders, bobTxn, clusterAlter}},
		{"GROUP;consumer-.*;READ;ALLOW;User:bob", nil, []Binding{aliceGroup}},
		{"GROUP;consumer-.*;READ;ALLOW;User:alice", []Binding{aliceGroup}, []Binding{aliceReadsOrders}},
		// Everything that can be synced; never cluster grants.
		{"*", []Binding{aliceReadsOrders, bobWritesOrders, aliceGroup, bobTxn}, []Binding{clusterAlter}},
		{"ANY;*;ANY;ANY", []Binding{aliceReadsOrders, bobTxn}, []Binding{clusterAlter}},
		// Names match whole: "order" does not select "orders".
		{"TOPIC;order", nil, []Binding{aliceReadsOrders}},
		{"topic;orders;read", []Binding{aliceReadsOrders}, []Binding{bobWritesOrders}},
		{"*;*;*;DENY", []Binding{bobWritesOrders}, []Binding{aliceReadsOrders}},
		{"TRANSACTIONAL_ID; tx-.* ", []Binding{bobTxn}, []Binding{aliceReadsOrders}},
		// Several rules: any one selects.
		{"TOPIC;orders, GROUP", []Binding{aliceReadsOrders, aliceGroup}, []Binding{bobWritesOrders, bobTxn}},
		{"", nil, []Binding{aliceReadsOrders}},
	} {
		rules, err := Parse(c.rules)
		if err != nil {
			t.Fatalf("%q: %v", c.rules, err)
		}
		for _, b := range c.match {
			if !rules.Match(b) {
				t.Errorf("%q does not select %s", c.rules, b)
			}
		}
		for _, b := range c.miss {
			if rules.Match(b) {
				t.Errorf("%q selects %s", c.rules, b)
			}
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for rules, want := range map[string]string{
		"CLUSTER":                 "CLUSTER ACLs are never synced",
		"USER;*":                  "USER ACLs are never synced",
		"TOPICS;orders":           `unknown resource type "TOPICS"`,
		"TOPIC;orders[":           `resource name: invalid regex "orders["`,
		"TOPIC;*;READS":           `unknown operation "READS"`,
		"TOPIC;*;READ;MAYBE":      `unknown permission type "MAYBE"`,
		"TOPIC;*;READ;ALLOW;(":    `principal: invalid regex "("`,
		"TOPIC;;READ":             "field 2 is empty",
		"TOPIC;a;READ;ALLOW;u;x":  "6 fields, at most 5",
		"TOPIC;ok, GROUP;a{1,3}":  `rule "3}"`,
		"TOPIC;ok,TOPIC;bad(,x":   `rule "TOPIC;bad("`,
		"TOPIC;*;UNKNOWN;ALLOW;u": `unknown operation "UNKNOWN"`,
	} {
		_, err := Parse(rules)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error saying %q", rules, err, want)
		}
	}
}
