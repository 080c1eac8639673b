package proxy

import (
	"time"

	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/internal/audit"
	"github.com/kmirror/kmirror/protocol"
)

// kmirror's internals (enforcement/internals.go): requests that would write,
// delete, reconfigure or join kmirror's own resources are answered here with
// the API's own error, whether or not any topic is read-only. Each refusal
// is audited and counted in kmirror.proxy.refusals{api,reason}.

// SetAudit replaces the audit log (audit_log, or WithAudit); nil discards.
func (p *Proxy) SetAudit(l *audit.Logger) { p.auditLog.Store(l) }

// refused audits and counts a refusal of the guard.
func (s *session) refused(h requestHeader, ref *enforcement.Refusal) {
	api := protocol.APIName(h.key)
	s.p.metrics.refusal(h.key, ref.Kind)
	if h.key == 0 { // a Produce: a write to kmirror's internals
		s.p.metrics.refusedWrite(ref.Kind)
	}
	_, principal, _ := s.identity(time.Now())
	e := audit.Event{Client: s.client.remoteAddr().String(), Listener: s.route.String(), Principal: principal,
		API: api, APIKey: h.key, Decision: audit.Refused, Reason: ref.Kind + ": " + ref.Reason, ErrorCode: ref.Code}
	if ref.Resource != "" && ref.Kind != enforcement.RefusedGroup && ref.Kind != enforcement.RefusedTransactionalID {
		e.Topics = []string{ref.Resource}
	}
	s.p.auditLog.Load().Log(e)
	s.log.Warn("refused a request touching kmirror's internals", "api", api, "principal", principal, "reason", ref.Kind, "resource", ref.Resource)
}

// largeProduceClear reports whether a large Produce may be forwarded before
// it is complete: its first bytes (frame, size prefix included) prove it
// does not touch kmirror's internals.
func (p *Proxy) largeProduceClear(h requestHeader, frame []byte) bool {
	g := p.guard.Load()
	return g == nil || g.ProduceHeadClear(h.version, h.flexible, frame[4+h.bodyOff:])
}
