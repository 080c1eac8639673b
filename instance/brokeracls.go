package instance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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
	return aclResults(res, err, "creating", "mirror topic "+topic, func(r kadm.CreateACLsResult) (kadm.ACLOperation, string, error) {
		return r.Operation, r.ErrMessage, r.Err
	})
}

// allow deletes the bindings deny created (and only those: the filter
// names principal, host, operations and permission exactly).
func (b *brokerACLs) allow(ctx context.Context, topic string) error {
	res, err := b.adm.DeleteACLs(ctx, denyEveryone(topic))
	return aclResults(res, err, "deleting", "topic "+topic+" at failover", func(r kadm.DeleteACLsResult) (kadm.ACLOperation, string, error) {
		return r.Operation, r.ErrMessage, r.Err
	})
}

// aclResults is the error of creating or deleting (doing) the DENY bindings
// on what: the request's, or the first binding's. result reads a binding's
// outcome (kadm's create and delete results are different types).
func aclResults[R any](res []R, err error, doing, on string, result func(R) (kadm.ACLOperation, string, error)) error {
	if err != nil {
		return fmt.Errorf("%s the DENY ACLs on %s: %w", doing, on, err)
	}
	for _, r := range res {
		if op, msg, err := result(r); err != nil {
			return fmt.Errorf("%s the DENY %s ACL on %s: %w (%s)", doing, op, on, err, msg)
		}
	}
	return nil
}

// probeTopic names the resource of the super-user probe; no such topic need exist.
const probeTopic = "__kmirror_acl_probe"

// checkBrokerACLs verifies the option's preconditions: the destination has
// an authoriser, and kmirror's principal is a super user on every broker.
// super.users is the authoriser's own setting, which DescribeConfigs does
// not show, so the check asks the authoriser instead: with a DENY DESCRIBE
// binding for kmirror's own principal on a probe topic, only a super user
// still may describe it (DENY beats any ALLOW for everyone else).
func checkBrokerACLs(ctx context.Context, cl *kgo.Client, sasl proxy.UpstreamSASL) error {
	if sasl.Username == "" {
		return errors.New("kmirror's destination principal is not known: set upstream_sasl (kmirror must authenticate as a super user of the destination)")
	}
	principal := "User:" + sasl.Username
	adm := kadm.NewClient(cl)
	probe := kadm.NewACLs().Topics(probeTopic).ResourcePatternType(kadm.ACLPatternLiteral).
		Deny(principal).DenyHosts("*").Operations(kadm.OpDescribe)
	res, err := adm.CreateACLs(ctx, probe)
	if err == nil && len(res) > 0 {
		err = res[0].Err
	}
	switch {
	case errors.Is(err, kerr.SecurityDisabled):
		return errors.New("the destination has no authoriser (authorizer.class.name is unset): there are no ACLs to keep mirror topics read-only with")
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return fmt.Errorf("%s may not create ACLs: it must be a super user of the destination (super.users)", principal)
	case err != nil:
		return fmt.Errorf("creating the super-user probe ACL: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteACLs(dctx, probe)
	}()
	brokers, err := adm.BrokerMetadata(ctx) // ListBrokers would ask for every topic's metadata
	if err != nil {
		return fmt.Errorf("listing the destination brokers: %w", err)
	}
	for _, b := range brokers.Brokers {
		if err := probeSuperUser(ctx, cl.Broker(int(b.NodeID)), principal); err != nil {
			return fmt.Errorf("broker %d: %w", b.NodeID, err)
		}
	}
	return nil
}

// probeSuperUser waits until the broker's authoriser has the probe binding
// (brokers apply ACLs from the metadata log a moment after the controller
// accepted them), then asks whether principal may still describe the probe
// topic.
func probeSuperUser(ctx context.Context, br *kgo.Broker, principal string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		req := kmsg.NewPtrDescribeACLsRequest()
		req.ResourceType, req.ResourceName = kmsg.ACLResourceTypeTopic, kmsg.StringPtr(probeTopic)
		req.ResourcePatternType = kmsg.ACLResourcePatternTypeLiteral
		req.Principal, req.Host = kmsg.StringPtr(principal), kmsg.StringPtr("*")
		req.Operation, req.PermissionType = kmsg.ACLOperationDescribe, kmsg.ACLPermissionTypeDeny
		resp, err := req.RequestWith(ctx, br)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err == nil && len(resp.Resources) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the super-user probe ACL did not reach the broker's authoriser (last error: %v): %w", err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	md := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(probeTopic)
	md.Topics = append(md.Topics, t)
	resp, err := md.RequestWith(ctx, br)
	if err != nil {
		return fmt.Errorf("super-user probe: %w", err)
	}
	if len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == kerr.TopicAuthorizationFailed.Code {
		return fmt.Errorf("%s is not a super user (super.users): the DENY ACLs for User:* would refuse kmirror's own copy", principal)
	}
	return nil
}
