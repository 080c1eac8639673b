package metasync

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/aclfilter"
)

// ACLResult is what an ACL sync did.
type ACLResult struct {
	Selected, Created int
	// SourceUnsecured: the source has no authorizer, so it has no ACLs.
	SourceUnsecured bool
}

func (r ACLResult) String() string {
	if r.SourceUnsecured {
		return "the source has no authorizer: no ACLs to copy"
	}
	return fmt.Sprintf("%d source ACLs selected, %d created on the destination", r.Selected, r.Created)
}

// SyncACLs creates on the destination the source ACLs that rules select
// and the destination lacks. It never deletes an ACL.
func SyncACLs(ctx context.Context, src, dst *kadm.Client, rules aclfilter.Rules) (ACLResult, error) {
	var res ACLResult
	if len(rules) == 0 {
		return res, nil
	}
	have, err := describeAll(ctx, src)
	if errors.Is(err, kerr.SecurityDisabled) {
		res.SourceUnsecured = true
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("describing the source's ACLs: %w (the source credentials need Describe on the cluster)", err)
	}
	selected := Selected(have, rules)
	res.Selected = len(selected)
	if len(selected) == 0 {
		return res, nil
	}
	existing, err := describeAll(ctx, dst)
	if errors.Is(err, kerr.SecurityDisabled) {
		return res, fmt.Errorf("the destination has no authorizer (authorizer.class.name), so the %d selected source ACLs cannot be created there: enable one, or re-create the mirror without acls.include", len(selected))
	}
	if err != nil {
		return res, fmt.Errorf("describing the destination's ACLs: %w", err)
	}
	missing := Missing(selected, existing)
	var errs []error
	for _, b := range missing {
		if err := create(ctx, dst, b); err != nil {
			errs = append(errs, fmt.Errorf("creating %s on the destination: %w (kmirror's destination credentials need Alter on the cluster)", b, err))
			continue
		}
		res.Created++
	}
	return res, errors.Join(errs...)
}

// Selected keeps the bindings the rules select, in a stable order.
func Selected(bs []aclfilter.Binding, rules aclfilter.Rules) []aclfilter.Binding {
	var out []aclfilter.Binding
	for _, b := range bs {
		literalOrPrefixed := b.PatternType == kmsg.ACLResourcePatternTypeLiteral || b.PatternType == kmsg.ACLResourcePatternTypePrefixed
		if literalOrPrefixed && rules.Match(b) {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Missing lists the wanted bindings that existing lacks.
func Missing(want, existing []aclfilter.Binding) []aclfilter.Binding {
	have := make(map[aclfilter.Binding]bool, len(existing))
	for _, b := range existing {
		have[b] = true
	}
	var out []aclfilter.Binding
	for _, b := range want {
		if !have[b] {
			out = append(out, b)
		}
	}
	return out
}

// describeAll lists every ACL of a cluster; kerr.SecurityDisabled when it
// has no authorizer.
func describeAll(ctx context.Context, adm *kadm.Client) ([]aclfilter.Binding, error) {
	filter := kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternAny).Operations().
		Allow().AllowHosts().Deny().DenyHosts()
	results, err := adm.DescribeACLs(ctx, filter)
	if err != nil {
		return nil, err
	}
	var out []aclfilter.Binding
	for _, r := range results {
		if r.Err != nil {
			return nil, fmt.Errorf("%w %s", r.Err, r.ErrMessage)
		}
		for _, d := range r.Described {
			out = append(out, aclfilter.Binding{ResourceType: d.Type, ResourceName: d.Name, PatternType: d.Pattern,
				Principal: d.Principal, Host: d.Host, Operation: d.Operation, Permission: d.Permission})
		}
	}
	return out, nil
}

func create(ctx context.Context, adm *kadm.Client, b aclfilter.Binding) error {
	acl := kadm.NewACLs().ResourcePatternType(b.PatternType).Operations(b.Operation)
	switch b.ResourceType {
	case kmsg.ACLResourceTypeTopic:
		acl.Topics(b.ResourceName)
	case kmsg.ACLResourceTypeGroup:
		acl.Groups(b.ResourceName)
	case kmsg.ACLResourceTypeTransactionalId:
		acl.TransactionalIDs(b.ResourceName)
	default:
		return fmt.Errorf("%s ACLs are not synced", b.ResourceType)
	}
	if b.Permission == kmsg.ACLPermissionTypeDeny {
		acl.Deny(b.Principal).DenyHosts(b.Host)
	} else {
		acl.Allow(b.Principal).AllowHosts(b.Host)
	}
	results, err := adm.CreateACLs(ctx, acl)
	if err != nil {
		return err
	}
	for _, r := range results {
		if r.Err != nil {
			return fmt.Errorf("%w %s", r.Err, r.ErrMessage)
		}
	}
	return nil
}
