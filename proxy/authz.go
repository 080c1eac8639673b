package proxy

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/audit"
	"github.com/kmirror/kmirror/protocol"
)

// Who may have kmirror's own answers (docs/SECURITY.md, "Who may call kmirror's RPCs").
// Every mirror RPC and every DescribeConfigs/IncrementalAlterConfigs of mirror resources
// passes authorize before its handler runs:
//
//   - client_auth sasl: nothing before the connection's SASL exchange succeeded (sasl.go);
//   - sasl and none: the destination's own authoriser decides, asked on the client's own
//     upstream connection (so for the client's principal), with a Metadata v10 request the
//     proxy slips into the connection's response FIFO: its response is consumed here and
//     never reaches the client (pending.intercept). The answer is cached per connection
//     for authzCacheFor;
//   - mtls: the broker sees kmirror's identity, so a local policy maps the client
//     certificate's principal to operations (Config.MTLSPolicy).
//
// Then the RPC's requirement (mirrorRequirements) is checked. Nothing here runs for
// forwarded requests.

// Client authentication modes (Config.ClientAuth).
const (
	ClientAuthSASL = "sasl"
	ClientAuthMTLS = "mtls"
	ClientAuthNone = "none"
)

// authzCacheFor is how long one connection reuses the broker's answer: long enough that a
// CLI's burst of RPCs asks once, short enough that a revoked ACL bites within seconds.
const authzCacheFor = 10 * time.Second

// authzCorrID is the correlation id of the proxy's own requests. Responses are matched by
// FIFO position, so it only has to be one that makes a stray answer obvious in a capture.
const authzCorrID int32 = -0x6b6d // "km"

// requirement is what a local answer needs from the principal.
type requirement struct {
	cluster []aclOp // operations needed on CLUSTER
	// topicRead: DESCRIBE on each topic shown may stand in for DESCRIBE on CLUSTER; without
	// it the answer shows only the topics the principal may describe.
	topicRead bool
	never     bool   // not served to clients at all
	verb      string // completes "... is required to VERB"
}

var mirrorRequirements = map[int16]requirement{
	protocol.KeyCreateMirror:           {cluster: []aclOp{opAlter}, verb: "create mirror %s"},
	protocol.KeyAddTopicsToMirror:      {cluster: []aclOp{opAlter, opCreate}, verb: "add topics to mirror %s (an add creates the destination topics)"},
	protocol.KeyRemoveTopicsFromMirror: {cluster: []aclOp{opAlter}, verb: "fail over mirror %s"},
	protocol.KeyPauseMirrorTopics:      {cluster: []aclOp{opAlter}, verb: "pause topics of mirror %s"},
	protocol.KeyResumeMirrorTopics:     {cluster: []aclOp{opAlter}, verb: "resume topics of mirror %s"},
	protocol.KeyDeleteMirror:           {cluster: []aclOp{opAlter}, verb: "delete mirror %s"},
	protocol.KeySwitchRoute:            {cluster: []aclOp{opAlter}, verb: "switch route %s (it fails the route's mirror over)"},
	protocol.KeyLastMirroredOffsets:    {cluster: []aclOp{opDescribe}, topicRead: true, verb: "read the last mirrored offsets of mirror %s"},
	protocol.KeyReadMirrorState:        {cluster: []aclOp{opDescribe}, topicRead: true, verb: "read the state of mirror %s"},
	protocol.KeyListMirrors:            {cluster: []aclOp{opDescribe}, topicRead: true, verb: "list mirrors%s"},
	protocol.KeyDescribeMirrors:        {cluster: []aclOp{opDescribe}, topicRead: true, verb: "describe mirrors %s"},
	protocol.KeyWriteMirrorState:       {never: true, verb: "write the state of mirror %s"},
}

// configRequirements: mirror config resources (resource type 64) in DescribeConfigs (32) and
// IncrementalAlterConfigs (44).
var configRequirements = map[int16]requirement{
	44: {cluster: []aclOp{opAlter}, verb: "alter the configs of mirror %s"},
	32: {cluster: []aclOp{opDescribe}, verb: "describe the configs of mirror %s"},
}

// Refusal reasons: the reason label of kmirror.proxy.refusals and audit lines.
const (
	reasonUnauthenticated = "unauthenticated"
	reasonUnauthorized    = "unauthorized"
	reasonNotServed       = "not_served"
	reasonAuthzFailed     = "authorizer_unavailable"
	reasonSASLv0          = "sasl_handshake_v0"
)

// subject is what a request names, for checks and audit lines.
type subject struct {
	mirror string
	route  string   // SwitchRoute: the route switched (the verb names it)
	topics []string // topics named (nil: none, or patterns only)
}

// decision is the outcome of authorize.
type decision struct {
	allowed   bool
	principal string
	code      int16  // refusal error code
	message   string // refusal message for the client
	reason    string // refusal reason label, or what allowed the request
	// filter, when set, hides the topics the principal may not describe (read RPCs
	// without DESCRIBE on CLUSTER).
	filter func(topic string) bool
}

// authState is a session's authorisation state beyond SASL (sasl.go).
type authState struct {
	certPrincipal string // mtls: "User:<subject>", set before the first request

	mu     sync.Mutex
	cached *cachedOps
}

type cachedOps struct {
	ops        authorizedOps
	at         time.Time
	generation uint64
	allTopics  bool     // ops.topics covers every topic the principal may describe
	asked      []string // else: the topics it was asked about
}

// covers reports whether the cached answer can decide a request for topics.
func (c *cachedOps) covers(now time.Time, generation uint64, topics []string, all bool) bool {
	if c == nil || now.Sub(c.at) > authzCacheFor || c.generation != generation {
		return false
	}
	if c.allTopics {
		return true
	}
	if all {
		return false
	}
	for _, t := range topics {
		if !slices.Contains(c.asked, t) {
			return false
		}
	}
	return true
}

// authorize decides whether the client may have the local answer to key. It runs on the
// client side, in request order, because asking the broker means queueing a request on the
// connection now; the returned function waits for the decision (off the client side).
func (s *session) authorize(key int16, req requirement, subj subject) func(ctx context.Context) decision {
	mode := s.p.cfg.ClientAuth
	now := time.Now()
	authenticated, principal, generation := s.identity(now)
	api := protocol.APIName(key)
	ready := func(d decision) func(context.Context) decision {
		return func(context.Context) decision { return d }
	}
	switch {
	case mode == ClientAuthSASL && !authenticated:
		return ready(decision{code: errSASLAuthenticationFailed, reason: reasonUnauthenticated,
			message: fmt.Sprintf("%s refused: this kmirror answers only SASL-authenticated connections; authenticate with the destination's SASL mechanism first", api)})
	case mode == ClientAuthMTLS && !authenticated:
		return ready(decision{code: errSASLAuthenticationFailed, reason: reasonUnauthenticated,
			message: fmt.Sprintf("%s refused: this kmirror answers only clients that present a TLS certificate", api)})
	case req.never:
		return ready(decision{principal: principal, code: protocol.ErrMirrorAuthorizationFailed.Code, reason: reasonNotServed,
			message: fmt.Sprintf("%s is never accepted from a client: kmirror instances write __mirror_state themselves, fenced by their writer epoch; use pause, resume or remove to change a mirror topic's state", api)})
	case mode == ClientAuthMTLS:
		ops := s.p.mtlsOps(principal)
		return ready(decide(key, req, subj, principal, &ops))
	}

	// The topics whose operations matter: those named, or every topic when a read RPC
	// names none (its answer is filtered).
	topics, all := subj.topics, req.topicRead && len(subj.topics) == 0
	if !req.topicRead {
		topics = []string{}
	}
	s.auth.mu.Lock()
	c := s.auth.cached
	s.auth.mu.Unlock()
	if c.covers(now, generation, topics, all) {
		return ready(decide(key, req, subj, principal, &c.ops))
	}
	asked := topics
	if all {
		asked = nil
	}
	answer := s.askBroker(asked)
	return func(ctx context.Context) decision {
		var frame []byte
		select {
		case <-ctx.Done(): // the connection closed (a broker closes on a request before SASL completes)
			return decision{principal: principal, code: protocol.ErrMirrorAuthorizationFailed.Code, reason: reasonAuthzFailed,
				message: fmt.Sprintf("%s refused: %v (connection closed)", api, errOpsUnavailable)}
		case frame = <-answer:
		}
		ops, err := decodeAuthorizedOps(frame)
		if err != nil {
			s.log.Warn("cannot read the destination's authorised operations", "err", err)
			return decision{principal: principal, code: protocol.ErrMirrorAuthorizationFailed.Code, reason: reasonAuthzFailed,
				message: fmt.Sprintf("%s refused: %v: %v", api, errOpsUnavailable, err)}
		}
		s.auth.mu.Lock()
		s.auth.cached = &cachedOps{ops: ops, at: now, generation: generation, allTopics: all, asked: topics}
		s.auth.mu.Unlock()
		return decide(key, req, subj, principal, &ops)
	}
}

// identity is who the connection is as far as the proxy knows: authenticated (SASL exchange
// succeeded, or a client certificate in mtls mode), the principal ("" if not visible) and
// the generation of that answer. Audit lines of refusals made elsewhere (the internals
// guard) take their principal from here.
func (s *session) identity(now time.Time) (authenticated bool, principal string, generation uint64) {
	if s.p.cfg.ClientAuth == ClientAuthMTLS {
		return s.auth.certPrincipal != "", s.auth.certPrincipal, 0
	}
	return s.sasl.state(now)
}

// askBroker queues the authorised-operations question on the client's upstream connection
// (topics nil: every topic) and returns where its response frame will arrive. The client
// side calls it for a request that holds an in-flight slot and forwards nothing itself, so
// the question takes that request's place in toUpstream; the FIFO has room for it
// (newSession).
func (s *session) askBroker(topics []string) chan []byte {
	body := authzMetadataRequest(topics).AppendTo(nil)
	frame := make([]byte, 4, 64+len(body))
	frame = protocol.AppendRequestHeader(frame, protocol.RequestHeader{
		APIKey: 3, APIVersion: authzMetadataVersion, CorrelationID: authzCorrID,
		ClientID: kmsg.StringPtr("kmirror-authz"), Flexible: requestIsFlexible(3, authzMetadataVersion),
	})
	frame = append(frame, body...)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	p := &pending{key: 3, version: authzMetadataVersion, corrID: authzCorrID, start: time.Now(), intercept: make(chan []byte, 1)}
	s.fifo <- p
	s.forward(outbound{frame: frame})
	return p.intercept
}

// decide checks req against ops.
func decide(key int16, req requirement, subj subject, principal string, ops *authorizedOps) decision {
	d := decision{allowed: true, principal: principal}
	var granted []string
	for _, op := range req.cluster {
		if ops.clusterAllows(op) {
			granted = append(granted, op.String()+" on CLUSTER")
			continue
		}
		if op == opDescribe && req.topicRead {
			if len(subj.topics) == 0 {
				d.filter = func(t string) bool { return ops.topicAllows(t, opDescribe) }
				granted = append(granted, "DESCRIBE on the topics shown")
				continue
			}
			if missing := firstMissing(subj.topics, ops); missing != "" {
				return decision{principal: principal, code: protocol.ErrTopicAuthorizationFailed.Code, reason: reasonUnauthorized,
					message: fmt.Sprintf("DESCRIBE on CLUSTER, or DESCRIBE on TOPIC %s, is required to %s (%s)", missing, verbFor(req, subj), principalPhrase(principal))}
			}
			granted = append(granted, "DESCRIBE on the topics named")
			continue
		}
		return decision{principal: principal, code: protocol.ErrMirrorAuthorizationFailed.Code, reason: reasonUnauthorized,
			message: fmt.Sprintf("%s on CLUSTER is required to %s (%s)", op, verbFor(req, subj), principalPhrase(principal))}
	}
	d.reason = strings.Join(granted, ", ")
	return d
}

func firstMissing(topics []string, ops *authorizedOps) string {
	for _, t := range topics {
		if !ops.topicAllows(t, opDescribe) {
			return t
		}
	}
	return ""
}

func verbFor(req requirement, subj subject) string {
	m := cmp.Or(subj.mirror, subj.route)
	if m == "" && req.verb == "list mirrors%s" {
		return "list mirrors"
	}
	if m == "" {
		m = "(all)"
	}
	return fmt.Sprintf(req.verb, m)
}

func principalPhrase(principal string) string {
	if principal == "" {
		return "principal as authenticated by the destination"
	}
	return "principal " + principal
}

// authzRefused counts, logs and audits a refusal of a local answer.
func (s *session) authzRefused(key int16, subj subject, d decision) {
	s.p.metrics.refusal(key, d.reason)
	s.log.Info("request refused", "api", protocol.APIName(key), "principal", d.principal, "reason", d.reason, "error", d.message)
	s.audit(key, subj, audit.Refused, d.principal, d.message, d.code)
}

// audit writes one audit line for a request of this connection.
func (s *session) audit(key int16, subj subject, outcome, principal, reason string, code int16) {
	s.p.auditLog.Load().Log(audit.Event{
		Client: s.client.remoteAddr().String(), Listener: s.route.String(), Principal: principal,
		API: protocol.APIName(key), APIKey: key, Mirror: subj.mirror, Route: subj.route, Topics: subj.topics,
		Decision: outcome, Reason: reason, ErrorCode: code,
	})
}

// mtlsOps are the operations the local policy grants principal (mtls mode): a grant's
// operations apply to CLUSTER, and so to every topic.
func (p *Proxy) mtlsOps(principal string) authorizedOps {
	var field int32
	for _, g := range p.cfg.MTLSPolicy {
		if g.Principal != principal && g.Principal != "User:*" {
			continue
		}
		for _, o := range g.Operations {
			if op, ok := mtlsOperations[strings.ToLower(o)]; ok {
				field |= 1 << uint(op)
			}
		}
	}
	return authorizedOps{cluster: field}
}

// mtlsOperations are the operation names mtls_policy accepts.
var mtlsOperations = map[string]aclOp{"alter": opAlter, "describe": opDescribe, "create": opCreate}

// errSASLAuthenticationFailed is Kafka's SASL_AUTHENTICATION_FAILED.
const errSASLAuthenticationFailed = 58

// mirrorSubject reads the mirror and topics a mirror RPC names (an undecodable request
// names nothing; its handler refuses it).
func mirrorSubject(key, version int16, body []byte) subject {
	req := protocol.RequestForKey(key)
	if req == nil {
		return subject{}
	}
	req.SetVersion(version)
	if req.ReadFrom(body) != nil {
		return subject{}
	}
	switch r := req.(type) {
	case *protocol.CreateMirrorRequest:
		return subject{mirror: r.MirrorName}
	case *protocol.DeleteMirrorRequest:
		return subject{mirror: r.MirrorName}
	case *protocol.SwitchRouteRequest:
		return subject{route: r.RouteName}
	case *protocol.DescribeMirrorsRequest:
		return subject{mirror: strings.Join(r.MirrorNames, ",")}
	case *protocol.AddTopicsToMirrorRequest:
		return namedTopics(r.MirrorName, r.Topics, func(t protocol.AddTopicsToMirrorRequestTopic) string { return t.Name })
	case *protocol.WriteMirrorStateRequest:
		return namedTopics(r.MirrorName, r.Topics, func(t protocol.WriteMirrorStateRequestTopic) string { return t.Name })
	case *protocol.RemoveTopicsFromMirrorRequest:
		return namedTopics(r.MirrorName, r.Topics, topicName)
	case *protocol.PauseMirrorTopicsRequest:
		return namedTopics(r.MirrorName, r.Topics, topicName)
	case *protocol.ResumeMirrorTopicsRequest:
		return namedTopics(r.MirrorName, r.Topics, topicName)
	case *protocol.LastMirroredOffsetsRequest:
		return namedTopics(r.MirrorName, r.Topics, partitionsTopic)
	case *protocol.ReadMirrorStateRequest:
		return namedTopics(r.MirrorName, r.Topics, partitionsTopic)
	}
	return subject{}
}

// namedTopics is the subject of a request that names a mirror and topics.
func namedTopics[T any](mirror string, topics []T, name func(T) string) subject {
	return subject{mirror: mirror, topics: mapSlice(topics, name)}
}

func topicName(t protocol.TopicName) string             { return t.Name }
func partitionsTopic(t protocol.TopicPartitions) string { return t.Name }

// configSubject reads the mirror resources a DescribeConfigs or IncrementalAlterConfigs
// request names.
func configSubject(key, version int16, body []byte) subject {
	var names []string
	for _, r := range configResources(key, version, body) {
		names = append(names, r.name)
	}
	return subject{mirror: strings.Join(names, ",")}
}

// configResource is one resource a DescribeConfigs or IncrementalAlterConfigs request names.
type configResource struct {
	typ  kmsg.ConfigResourceType
	name string
}

// configResources decodes the resources of a DescribeConfigs (32) or IncrementalAlterConfigs
// (44) request: none when it does not decode.
func configResources(key, version int16, body []byte) []configResource {
	req := kmsg.RequestForKey(key)
	if req == nil {
		return nil
	}
	req.SetVersion(version)
	if req.ReadFrom(body) != nil {
		return nil
	}
	switch r := req.(type) {
	case *kmsg.DescribeConfigsRequest:
		return mapSlice(r.Resources, func(res kmsg.DescribeConfigsRequestResource) configResource {
			return configResource{res.ResourceType, res.ResourceName}
		})
	case *kmsg.IncrementalAlterConfigsRequest:
		return mapSlice(r.Resources, func(res kmsg.IncrementalAlterConfigsRequestResource) configResource {
			return configResource{res.ResourceType, res.ResourceName}
		})
	}
	return nil
}

// mapSlice is f of every element of ts, in order.
func mapSlice[T, U any](ts []T, f func(T) U) []U {
	out := make([]U, 0, len(ts))
	for _, t := range ts {
		out = append(out, f(t))
	}
	return out
}

// configRefusal answers a mirror-config request with the refusal on every resource (the
// request was decoded before, by the config handler).
func configRefusal(key, version int16, body []byte, code int16, msg string) kmsg.Response {
	resources, message := configResources(key, version, body), kmsg.StringPtr(msg)
	if key == 44 {
		resp := kmsg.NewPtrIncrementalAlterConfigsResponse()
		resp.Resources = mapSlice(resources, func(r configResource) kmsg.IncrementalAlterConfigsResponseResource {
			return kmsg.IncrementalAlterConfigsResponseResource{ErrorCode: code, ErrorMessage: message, ResourceType: r.typ, ResourceName: r.name}
		})
		return resp
	}
	resp := kmsg.NewPtrDescribeConfigsResponse()
	resp.Resources = mapSlice(resources, func(r configResource) kmsg.DescribeConfigsResponseResource {
		return kmsg.DescribeConfigsResponseResource{ErrorCode: code, ErrorMessage: message, ResourceType: r.typ, ResourceName: r.name}
	})
	return resp
}

// configRefusalCode: Kafka's admin clients know CLUSTER_AUTHORIZATION_FAILED on a config
// resource; the proposal's 144 would reach them as an unknown error.
func configRefusalCode(d decision) int16 {
	if d.code == protocol.ErrMirrorAuthorizationFailed.Code {
		return errClusterAuthorizationFailed
	}
	return d.code
}

const errClusterAuthorizationFailed = 31

// filterTopics hides from a read RPC's response what the principal may not describe: topics
// without DESCRIBE, mirrors left without topics, and cluster-wide details (group and sync
// jobs, routes). wantNames: the ListMirrors request asked for topic names (the proxy asks for them
// regardless, to filter).
func filterTopics(resp kmsg.Response, keep func(string) bool, wantNames bool) {
	switch r := resp.(type) {
	case *protocol.DescribeMirrorsResponse:
		mirrors := r.Mirrors[:0]
		for _, m := range r.Mirrors {
			m.Topics = slices.DeleteFunc(m.Topics, func(t protocol.DescribeMirrorsResponseTopic) bool { return !keep(t.Name) })
			m.Groups, m.Syncs = nil, nil
			if len(m.Topics) > 0 {
				mirrors = append(mirrors, m)
			}
		}
		r.Mirrors = mirrors
		r.Routes = nil // where applications connect and how a switch went: cluster-wide
	case *protocol.ListMirrorsResponse:
		mirrors := r.Mirrors[:0]
		for _, m := range r.Mirrors {
			m.TopicNames = slices.DeleteFunc(m.TopicNames, func(t string) bool { return !keep(t) })
			m.TopicCount = int32(len(m.TopicNames))
			if !wantNames {
				m.TopicNames = nil
			}
			if m.TopicCount > 0 {
				mirrors = append(mirrors, m)
			}
		}
		r.Mirrors = mirrors
	case *protocol.LastMirroredOffsetsResponse:
		r.Topics = slices.DeleteFunc(r.Topics, func(t protocol.LastMirroredOffsetsResponseTopic) bool { return !keep(t.Name) })
	case *protocol.ReadMirrorStateResponse:
		r.Topics = slices.DeleteFunc(r.Topics, func(t protocol.ReadMirrorStateResponseTopic) bool { return !keep(t.Name) })
	}
}

// withTopicNames re-encodes a ListMirrors request body asking for topic names; ok reports
// whether the client asked for them itself.
func withTopicNames(version int16, body []byte) (out []byte, asked bool) {
	req := protocol.NewPtrListMirrorsRequest()
	req.SetVersion(version)
	if req.ReadFrom(body) != nil {
		return body, false
	}
	asked = req.IncludeTopicNames
	req.IncludeTopicNames = true
	return req.AppendTo(nil), asked
}

// logClientAuth says at start-up which client authentication applies and, where the
// destination's authoriser decides, whether the destination has one (in the background: a
// destination that is slow to answer must not delay start-up).
func (p *Proxy) logClientAuth(ctx context.Context) {
	switch p.cfg.ClientAuth {
	case ClientAuthMTLS:
		p.log.Info("client authentication: mtls; mirror RPCs are authorised by mtls_policy", "grants", len(p.cfg.MTLSPolicy))
		return
	case ClientAuthSASL:
		p.log.Info("client authentication: sasl; mirror RPCs are answered after the client's SASL exchange succeeded, and authorised by the destination's authoriser")
	default:
		p.log.Warn("client authentication: none; mirror RPCs are authorised by the destination's authoriser for whatever principal the broker gives the connection")
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DialTimeout)
		defer cancel()
		has, err := p.destinationHasAuthorizer(ctx)
		switch {
		case err != nil:
			p.log.Info("could not tell whether the destination has an authoriser", "err", err)
		case !has:
			p.log.Warn("destination has no authorizer: every authenticated client may change mirrors")
		}
	}()
}

// destinationHasAuthorizer asks with DescribeAcls, which a broker without an authoriser
// answers with SECURITY_DISABLED.
func (p *Proxy) destinationHasAuthorizer(ctx context.Context) (bool, error) {
	opts, err := p.UpstreamClientOptions()
	if err != nil {
		return false, err
	}
	cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(1))...)
	if err != nil {
		return false, fmt.Errorf("creating a client for the destination: %w", err)
	}
	defer cl.Close()
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType = kmsg.ACLResourceTypeCluster
	req.ResourcePatternType = kmsg.ACLResourcePatternTypeAny
	req.Operation = kmsg.ACLOperationAny
	req.PermissionType = kmsg.ACLPermissionTypeAny
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return false, fmt.Errorf("DescribeAcls: %w", err)
	}
	if resp.ErrorCode == errSecurityDisabled {
		return false, nil
	}
	return true, nil
}

// errSecurityDisabled is Kafka's SECURITY_DISABLED.
const errSecurityDisabled = 54
