package instance

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kmirror/kmirror/proxy"
)

// Read-only at the brokers (opt-in hardening, Config.BrokerACLs): the proxy
// refuses writes to mirror topics, but a client that reaches a destination
// broker directly bypasses it. With the option, while a topic is mirrored
// the destination's own authoriser refuses everyone but super users:
// kmirror creates DENY ACLs for User:* (any host, the topic's literal name)
// on WRITE, DELETE and ALTER_CONFIGS when a partition of the topic prepares
// (before it is MIRRORING), and deletes them when a partition of the topic
// fails over, after its copy stopped and before it is reported STOPPED.
// Pause and hand-over keep them. Kafka's ACLs are per topic, so the first
// partition to fail over opens the whole topic at the brokers; the proxy
// keeps refusing the partitions not yet STOPPED.
//
// kmirror's own writes pass because Kafka's StandardAuthorizer lets super
// users bypass every ACL, DENY included; a DENY for User:* would otherwise
// refuse kmirror's copy too. Hence the precondition checked at start:
// kmirror's destination principal is a super user of every broker.
//
// Both calls are idempotent, so a new owner after a crash converges:
// creating an existing binding changes nothing in Kafka, deleting a missing
// one deletes nothing.

// brokerACLs creates and deletes the DENY bindings on mirror topics.
type brokerACLs struct{ adm *kadm.Client }

// denyEveryone is the binding set of one topic: DENY User:* from any host.
func denyEveryone(topic string) *kadm.ACLBuilder {
	return kadm.NewACLs().Topics(topic).ResourcePatternType(kadm.ACLPatternLiteral).
		Deny("User:*").DenyHosts("*").Operations(kadm.OpWrite, kadm.OpDelete, kadm.OpAlterConfigs)
}

// deny makes the brokers refuse everyone but super users writes, deletes
// and config changes of topic.
func (b *brokerACLs) deny(ctx context.Context, topic string) error {
	res, err := b.adm.CreateACLs(ctx, denyEveryone(topic))
	if err != nil {
		return fmt.Errorf("creating the DENY ACLs on mirror topic %s: %w", topic, err)
	}
	for _, r := range res {
		if r.Err != nil {
			return fmt.Errorf("creating the DENY %s ACL on mirror topic %s: %w (%s)", r.Operation, topic, r.Err, r.ErrMessage)
		}
	}
	return nil
}

// allow deletes the bindings deny created (and only those: the filter
// names principal, host, operations and permission exactly).
func (b *brokerACLs) allow(ctx context.Context, topic string) error {
	res, err := b.adm.DeleteACLs(ctx, denyEveryone(topic))
	if err != nil {
		return fmt.Errorf("deleting the DENY ACLs on topic %s at failover: %w", topic, err)
	}
	for _, r := range res {
		if r.Err != nil {
			return fmt.Errorf("deleting the DENY %s ACL on topic %s at failover: %w (%s)", r.Operation, topic, r.Err, r.ErrMessage)
		}
	}
	return nil
}

// checkBrokerACLs verifies the option's preconditions: the destination has
// an authoriser, and kmirror's principal is a super user on every broker.
func checkBrokerACLs(ctx context.Context, adm *kadm.Client, sasl proxy.UpstreamSASL) error {
	if sasl.Username == "" {
		return errors.New("kmirror's destination principal is not known: set upstream_sasl (kmirror must authenticate as a super user of the destination)")
	}
	principal := "User:" + sasl.Username
	probe := kadm.NewACLs().Topics("__kmirror_probe").ResourcePatternType(kadm.ACLPatternLiteral).
		Deny(principal).Operations(kadm.OpWrite)
	res, err := adm.DescribeACLs(ctx, probe)
	if err == nil && len(res) > 0 {
		err = res[0].Err
	}
	switch {
	case errors.Is(err, kerr.SecurityDisabled):
		return errors.New("the destination has no authoriser (authorizer.class.name is unset): there are no ACLs to keep mirror topics read-only with")
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return fmt.Errorf("%s may not describe ACLs: it must be a super user of the destination (super.users)", principal)
	case err != nil:
		return fmt.Errorf("describing ACLs: %w", err)
	}
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return fmt.Errorf("listing the destination brokers: %w", err)
	}
	configs, err := adm.DescribeBrokerConfigs(ctx, brokers.NodeIDs()...)
	if err != nil {
		return fmt.Errorf("reading the brokers' super.users: %w", err)
	}
	for _, rc := range configs {
		if rc.Err != nil {
			return fmt.Errorf("reading broker %s's super.users: %w", rc.Name, rc.Err)
		}
		super := ""
		for _, c := range rc.Configs {
			if c.Key == "super.users" {
				super = c.MaybeValue()
			}
		}
		if !superUser(super, principal) {
			return fmt.Errorf("%s is not a super user of broker %s (super.users=%q): the DENY ACLs for User:* would refuse kmirror's own copy",
				principal, rc.Name, super)
		}
	}
	return nil
}

// superUser reports whether principal is in a super.users value
// (principals separated by semicolons).
func superUser(list, principal string) bool {
	for _, p := range strings.Split(list, ";") {
		if strings.TrimSpace(p) == principal {
			return true
		}
	}
	return false
}
