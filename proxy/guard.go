package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/metric"

	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/internal/clientid"
)

// Read-only mirror topics (enforcement/). The guard sees Produce and the admin
// mutations before they are forwarded: refused parts are answered here,
// allowed parts go upstream, and a Produce that mixes both is forwarded
// without the refused partitions and its response merged with their refusals.
// While no topic is read-only the guard costs one atomic load per request.

// SetGuard installs read-only enforcement; nil removes it.
func (p *Proxy) SetGuard(g *enforcement.Guard) { p.guard.Store(g) }

func (p *Proxy) guardActive() bool {
	if p.appRoute != nil {
		// A route's every Produce goes through dispatch, whole: a freeze must see it
		// before any byte is forwarded (route.go, FreezeRoute).
		return true
	}
	g := p.guard.Load()
	return g != nil && g.Active()
}

// guardTimeout bounds a guard decision that has to resolve a topic id
// upstream (Produce v13+ naming a topic the guard has not seen).
const guardTimeout = 5 * time.Second

// enforce applies the guard to a request; it returns a locally answered
// response frame, or the frame to forward (possibly rewritten), and sets
// pr.merge when the response must be merged with refusals. The internals
// rules apply always; the read-only rules while some topic is read-only.
func (s *session) enforce(h requestHeader, frame []byte, pr *pending, acks int16) (local []byte, forward []byte, err error) {
	g := s.p.guard.Load()
	if rt := s.p.appRoute; rt != nil {
		if h.key == 18 {
			forward, err := s.routeApiVersions(h, frame)
			return nil, forward, err
		}
		// A route leading to the standby shares its guard (SwitchRoute); one leading to its
		// primary has none (the primary's topics are not this kmirror's to guard). A switched
		// route refuses the producer ids of the mirror's writers on the cluster it leads to
		// (MirrorWriters), in either direction. A freeze comes first: what it lets through
		// still meets the guard and the writers (a switch back freezes a route that leads to
		// the standby).
		f := rt.freeze.Load()
		var w enforcement.MirrorWriters
		if ws := rt.writers.Load(); ws != nil {
			w = *ws
		}
		if h.key == 0 && (f.Frozen() || s.refusedFrozen.Load()) {
			return s.freezeProduce(f, g, w, h, frame, pr, acks)
		}
		if f.Frozen() && (h.key == 8 || h.key == 28) {
			if local, err := s.freezeCommit(f, h, frame); err != nil || local != nil {
				return local, nil, err
			}
		}
		if h.key == 0 && (g != nil || len(w) > 0) {
			return s.enforceProduce(g, w, h, frame, pr, acks)
		}
	}
	if g == nil || !enforcement.InternalKey(h.key) {
		return nil, frame, nil
	}
	body := frame[4+h.bodyOff:]
	hv := responseHeaderVersion(h.key, h.version)
	if h.key == 0 {
		return s.enforceProduce(g, nil, h, frame, pr, acks)
	}
	ctx, cancel := context.WithTimeout(s.ctx, guardTimeout)
	defer cancel()
	resp, ref, err := g.CheckInternals(ctx, h.key, h.version, h.flexible, body)
	if err != nil {
		return nil, nil, fmt.Errorf("checking %s against kmirror's internals: %w", kmsg.NameForKey(h.key), err)
	}
	if resp != nil {
		s.refused(h, ref)
		return appendResponseFrame(nil, h.corrID, hv, resp.AppendTo(nil)), nil, nil
	}
	if enforcement.AdminKeys[h.key] && g.Active() {
		resp, err := g.CheckAdmin(ctx, h.key, h.version, body)
		if err != nil {
			return nil, nil, fmt.Errorf("checking %s against mirror topics: %w", kmsg.NameForKey(h.key), err)
		}
		if resp != nil {
			s.p.metrics.refusedWrite(refusedMirrorTopicAdmin)
			return appendResponseFrame(nil, h.corrID, hv, resp.AppendTo(nil)), nil, nil
		}
	}
	return nil, frame, nil
}

// enforceProduce applies the guard g (nil: none) and a switched route's mirror writers w
// (nil: none) to a Produce request, and answers or forwards what is left.
func (s *session) enforceProduce(g *enforcement.Guard, w enforcement.MirrorWriters, h requestHeader, frame []byte, pr *pending, acks int16) (local, forward []byte, err error) {
	d, err := s.produceDecision(g, w, h, frame[4+h.bodyOff:])
	if err != nil {
		return nil, nil, err
	}
	local, forward = produceOutcome(h, frame, pr, acks, d)
	return local, forward, nil
}

// produceDecision decides a Produce body against the guard g and the mirror writers w.
func (s *session) produceDecision(g *enforcement.Guard, w enforcement.MirrorWriters, h requestHeader, body []byte) (enforcement.ProduceDecision, error) {
	d := enforcement.ProduceDecision{Forward: body}
	var err error
	switch {
	case g == nil:
	case g.ProduceTouches(h.version, h.flexible, body):
		ctx, cancel := context.WithTimeout(s.ctx, guardTimeout)
		var ref *enforcement.Refusal
		d, ref, err = g.ProduceInternals(ctx, h.version, h.flexible, body)
		cancel()
		if ref != nil {
			s.refused(h, ref)
		}
	case g.Active():
		ctx, cancel := context.WithTimeout(s.ctx, guardTimeout)
		d, err = g.FilterProduce(ctx, h.version, body)
		cancel()
		if d.Refused != nil {
			s.p.metrics.refusedWrite(refusedMirrorTopic)
		}
	}
	if err != nil {
		return d, fmt.Errorf("checking Produce against mirror topics: %w", err)
	}
	if d.Forward != nil && len(w) > 0 {
		dw, err := w.Produce(s.ctx, h.version, d.Forward)
		if err != nil {
			return d, fmt.Errorf("route %s: checking Produce against the mirror's writers: %w", s.p.appRoute.name, err)
		}
		if dw.Refused != nil {
			s.p.metrics.refusal(h.key, refusedWriterClash)
			d.Refused = mergeDecisions(d.Refused, dw.Refused)
			d.Forward = dw.Forward
		}
	}
	return d, nil
}

// mergeDecisions adds the refusals b to a (either may be nil).
func mergeDecisions(a, b *kmsg.ProduceResponse) *kmsg.ProduceResponse {
	if a == nil {
		return b
	}
	enforcement.MergeProduce(a, b)
	return a
}

// produceOutcome turns a Produce decision into the proxy's answer: the request
// forwarded whole, answered here (nothing for acks=0), or forwarded without its
// refused partitions with pr.merge set to add their refusals to the response.
func produceOutcome(h requestHeader, frame []byte, pr *pending, acks int16, d enforcement.ProduceDecision) (local, forward []byte) {
	if d.Refused == nil {
		return nil, frame
	}
	if d.Forward == nil {
		if acks == 0 {
			return []byte{}, nil // nothing to forward, nothing to answer
		}
		return appendResponseFrame(nil, h.corrID, responseHeaderVersion(h.key, h.version), d.Refused.AppendTo(nil)), nil
	}
	out := make([]byte, 0, 4+h.bodyOff+len(d.Forward))
	out = append(out, frame[:4+h.bodyOff]...)
	out = append(out, d.Forward...)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	pr.merge = d.Refused
	return nil, out
}

// mergeRefused adds a split Produce's refusals to the broker's response.
func mergeRefused(pr *pending) func(kmsg.Response) bool {
	return func(r kmsg.Response) bool {
		enforcement.MergeProduce(r.(*kmsg.ProduceResponse), pr.merge)
		return true
	}
}

// UpstreamClientOptions are franz-go options that reach the destination
// brokers directly with the proxy's upstream TLS and SASL settings (for
// kmirror's own clients: the control plane and the copy pipeline).
func (p *Proxy) UpstreamClientOptions() ([]kgo.Opt, error) {
	auth, err := p.upstreamAuth().Options()
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{kgo.SeedBrokers(p.upstream().bootstrap...), kgo.DialTimeout(p.cfg.DialTimeout), kgo.ClientID(clientid.Admin)}
	return append(opts, auth...), nil
}

// MeterProvider is where the proxy's metrics live; other parts of an
// instance register theirs here to share the /metrics endpoint.
func (p *Proxy) MeterProvider() metric.MeterProvider { return p.metrics.provider }
