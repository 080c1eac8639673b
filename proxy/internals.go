package proxy

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/internal/audit"
	"github.com/kmirror/kmirror/protocol"
)

// kmirror's internals (enforcement/internals.go): requests that would write,
// delete, reconfigure or join kmirror's own resources are answered here with
// the API's own error, whether or not any topic is read-only. Each refusal
// is audited and counted in kmirror.proxy.refusals{api,reason}.

// SetAudit installs the audit log refusals are written to; nil discards.
func (p *Proxy) SetAudit(l *audit.Logger) { p.audit.Store(l) }

func newRefusalCounter(mp metric.MeterProvider) (metric.Int64Counter, error) {
	return mp.Meter("github.com/kmirror/kmirror/proxy").Int64Counter("kmirror.proxy.refusals",
		metric.WithDescription("Requests the proxy refused on its own authority, by API and reason."))
}

// refused audits and counts a refusal of the guard.
func (s *session) refused(h requestHeader, ref *enforcement.Refusal) {
	api := protocol.APIName(h.key)
	if s.p.refusals != nil {
		s.p.refusals.Add(context.Background(), 1, metric.WithAttributes(attribute.String("api", api), attribute.String("reason", ref.Kind)))
	}
	e := audit.Event{Client: s.client.remoteAddr().String(), Listener: s.route.String(), API: api, APIKey: h.key,
		Decision: audit.Refused, Reason: ref.Kind + ": " + ref.Reason, ErrorCode: ref.Code}
	// Principal stays empty here: the authorisation layer, which tracks
	// each session's authenticated principal, fills it.
	if ref.Resource != "" && ref.Kind != enforcement.RefusedGroup && ref.Kind != enforcement.RefusedTransactionalID {
		e.Topics = []string{ref.Resource}
	}
	s.p.audit.Load().Log(e)
	s.log.Warn("refused a request touching kmirror's internals", "api", api, "reason", ref.Kind, "resource", ref.Resource)
}

// largeProduceClear reports whether a large Produce may be forwarded before
// it is complete: its first bytes (frame, size prefix included) prove it
// does not touch kmirror's internals.
func (p *Proxy) largeProduceClear(h requestHeader, frame []byte) bool {
	g := p.guard.Load()
	return g == nil || g.ProduceHeadClear(h.version, h.flexible, frame[4+h.bodyOff:])
}
