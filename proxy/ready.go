package proxy

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Health endpoints on the metrics address, for load balancers and orchestrators
// (docs/deploy.md). Both are read-only, answer anyone who can reach the metrics address, and
// carry no secrets: a fixed word, or the reason the instance is not ready (group membership,
// a state topic partition and offsets, or a broker error message) — nothing a client of the
// Kafka port could not learn from the destination's own metadata (docs/SECURITY.md).
//
//   - /healthz: liveness. 200 while the process serves HTTP at all.
//   - /ready: readiness. 200 when the instance should get client connections: not shutting
//     down, and the readiness check (SetReadiness: the coordinator's, joined to the group and
//     caught up with __mirror_state) passes; 503 with the reason otherwise.

// readyCheckTimeout bounds one readiness check; balancers check every few seconds.
const readyCheckTimeout = 3 * time.Second

// SetReadiness sets what /ready asks beyond the proxy's own state (nil: nothing more).
func (p *Proxy) SetReadiness(check func(context.Context) error) { p.readiness.Store(&check) }

// Ready reports nil when the instance should get client connections, else why not.
func (p *Proxy) Ready(ctx context.Context) error {
	if p.draining.Load() {
		return fmt.Errorf("shutting down")
	}
	if check := p.readiness.Load(); check != nil && *check != nil {
		return (*check)(ctx)
	}
	return nil
}

// handleHealth registers /healthz and /ready on the metrics mux.
func (p *Proxy) handleHealth(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyCheckTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := p.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		_, _ = fmt.Fprintln(w, "ready")
	})
}
