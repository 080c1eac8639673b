// Package aclfilter parses a mirror's acls.include, the rules that pick
// which source ACLs are created on the destination, and matches ACL bindings
// against them.
//
// A rule is resourceType;resourceName;operation;permissionType;principal
// (the Cluster Mirroring proposal's format). Trailing fields may be omitted
// and mean any; `*` means any; resourceName and principal are regular
// expressions matched against the whole ACL resource name and principal as
// written (a PREFIXED ACL on "orders-" is matched as "orders-"). Rules are
// separated by commas, so a regex in a rule cannot contain one.
//
// Only TOPIC, GROUP and TRANSACTIONAL_ID ACLs are ever synced: cluster-wide,
// user and delegation-token grants are decisions of the destination's
// operators, and a rule naming them is refused.
package aclfilter

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Binding is one ACL: who may (or may not) do what on which resources.
type Binding struct {
	ResourceType kmsg.ACLResourceType
	ResourceName string
	PatternType  kmsg.ACLResourcePatternType
	Principal    string
	Host         string
	Operation    kmsg.ACLOperation
	Permission   kmsg.ACLPermissionType
}

func (b Binding) String() string {
	return fmt.Sprintf("%s:%s:%s %s %s %s from %s", b.ResourceType, b.PatternType, b.ResourceName,
		b.Permission, b.Principal, b.Operation, b.Host)
}

// Synced reports whether ACLs of a resource type can be synced at all.
func Synced(t kmsg.ACLResourceType) bool {
	switch t {
	case kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeTransactionalId:
		return true
	}
	return false
}

// Rule is one parsed acls.include rule. A zero enum field (UNKNOWN) and a
// nil regex mean any.
type Rule struct {
	text         string
	resourceType kmsg.ACLResourceType
	resourceName *regexp.Regexp
	operation    kmsg.ACLOperation
	permission   kmsg.ACLPermissionType
	principal    *regexp.Regexp
}

func (r Rule) String() string { return r.text }

// Rules is a parsed acls.include; no rules match nothing.
type Rules []Rule

// Parse parses a comma-separated list of rules. The error names the rule
// and the field that is wrong.
func Parse(value string) (Rules, error) {
	var rules Rules
	for _, text := range strings.Split(value, ",") {
		if text = strings.TrimSpace(text); text == "" {
			continue
		}
		r, err := parseRule(text)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w (format: resourceType;resourceName;operation;permissionType;principal, `*` for any, trailing fields may be left out; commas separate rules)", text, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func parseRule(text string) (Rule, error) {
	fields := strings.Split(text, ";")
	if len(fields) > 5 {
		return Rule{}, fmt.Errorf("%d fields, at most 5", len(fields))
	}
	for len(fields) < 5 {
		fields = append(fields, "*")
	}
	for i, f := range fields {
		fields[i] = strings.TrimSpace(f)
		if fields[i] == "" {
			return Rule{}, fmt.Errorf("field %d is empty; use * for any", i+1)
		}
	}
	r := Rule{text: text}
	if !isAny(fields[0]) {
		t, err := kmsg.ParseACLResourceType(fields[0])
		if err != nil {
			return Rule{}, fmt.Errorf("unknown resource type %q: use TOPIC, GROUP, TRANSACTIONAL_ID or *", fields[0])
		}
		if !Synced(t) {
			return Rule{}, fmt.Errorf("%s ACLs are never synced (only TOPIC, GROUP and TRANSACTIONAL_ID): grants of that kind belong to the destination's operators", t)
		}
		r.resourceType = t
	}
	var err error
	if r.resourceName, err = compile(fields[1]); err != nil {
		return Rule{}, fmt.Errorf("resource name: %w", err)
	}
	if r.operation, err = parseEnum(fields[2], kmsg.ParseACLOperation, kmsg.ACLOperationUnknown, kmsg.ACLOperationAny); err != nil {
		return Rule{}, fmt.Errorf("unknown operation %q: use e.g. READ, WRITE, DESCRIBE, ALL or *", fields[2])
	}
	if r.permission, err = parseEnum(fields[3], kmsg.ParseACLPermissionType, kmsg.ACLPermissionTypeUnknown, kmsg.ACLPermissionTypeAny); err != nil {
		return Rule{}, fmt.Errorf("unknown permission type %q: use ALLOW, DENY or *", fields[3])
	}
	if r.principal, err = compile(fields[4]); err != nil {
		return Rule{}, fmt.Errorf("principal: %w", err)
	}
	return r, nil
}

// parseEnum parses an operation or permission type field; any (as "*",
// "ANY" or kmsg's any value) is the zero value, which matches everything.
func parseEnum[T comparable](f string, parse func(string) (T, error), unknown, anyValue T) (T, error) {
	var zero T
	if isAny(f) {
		return zero, nil
	}
	v, err := parse(f)
	if err != nil || v == unknown {
		return zero, fmt.Errorf("unknown value %q", f)
	}
	if v == anyValue {
		return zero, nil
	}
	return v, nil
}

// isAny reports whether an enum field means any. ANY is Kafka's own word
// for it in ACL filters.
func isAny(f string) bool { return f == "*" || strings.EqualFold(f, "ANY") }

// compile compiles a whole-name regex; `*` alone (not a valid regex) means
// any.
func compile(f string) (*regexp.Regexp, error) {
	if f == "*" {
		return nil, nil
	}
	re, err := regexp.Compile("^(?:" + f + ")$")
	if err != nil {
		return nil, fmt.Errorf("invalid regex %q: %w", f, err)
	}
	return re, nil
}

// Match reports whether a rule selects the binding.
func (r Rule) Match(b Binding) bool {
	switch {
	case !Synced(b.ResourceType):
		return false
	case r.resourceType != kmsg.ACLResourceTypeUnknown && r.resourceType != b.ResourceType:
		return false
	case r.resourceName != nil && !r.resourceName.MatchString(b.ResourceName):
		return false
	case r.operation != kmsg.ACLOperationUnknown && r.operation != b.Operation:
		return false
	case r.permission != kmsg.ACLPermissionTypeUnknown && r.permission != b.Permission:
		return false
	case r.principal != nil && !r.principal.MatchString(b.Principal):
		return false
	}
	return true
}

// Match reports whether any rule selects the binding.
func (rs Rules) Match(b Binding) bool {
	for _, r := range rs {
		if r.Match(b) {
			return true
		}
	}
	return false
}
