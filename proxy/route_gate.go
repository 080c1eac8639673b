package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
)

// routeGate keeps a route that is not open yet (WithRoutesClosedAtStart) from listening: its
// bootstrap and broker ports refuse connections until OpenRoute, so no client reaches the
// primary through it before the instance has applied the route's switch state, and behind a
// load balancer (docs/deploy.md: retries with redispatch) a client's connection goes to a live
// instance instead.
//
// Why not accept and hold the connections, as routes first did: a just-restarted instance
// opens its routes only once it has rejoined the coordinators' group, a session timeout after
// it was killed, and the load balancer had not seen it down (it listened again within a
// second; its leastconn sent the reconnecting clients there, having none). Its health check
// then failed until the rejoin and it shut the held connections down, each before its
// ApiVersions answer: franz-go takes that for a TLS mistake (kgo.ErrFirstReadEOF) and fails
// the request, and a group member whose heartbeat failed so ended its session and read again
// from its last commit (TestRouteSwitchDriverKilledAtEachStep, CI 2026-12-07; the restarted
// instances' logs held such connections in five of the test's seven steps). A refused
// connection is what every client and balancer takes for an instance not up yet.
type routeGate struct {
	mu      sync.Mutex
	closed  bool
	waiting []*gatedListener // listeners asked for while closed, not yet listening
}

// gatedListener is one of a closed route's listeners: its address is taken at once (a port
// another process holds fails the route's start, as for any listener), released, and
// listened on when the route opens.
type gatedListener struct {
	bound net.Addr
	start func(addr string) (listener, error)

	mu      sync.Mutex
	ln      listener // nil until the route opens
	stopped bool
}

// listen returns a gated listener for addr while the gate is closed (gated true); start
// listens on an address once it opens. Open, it returns gated false: the caller listens.
func (g *routeGate) listen(addr string, start func(addr string) (listener, error)) (ln listener, gated bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		return nil, false, nil
	}
	probe, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, true, err
	}
	bound := probe.Addr()
	if err := probe.Close(); err != nil {
		return nil, true, fmt.Errorf("releasing %s until the route opens: %w", bound, err)
	}
	gl := &gatedListener{bound: bound, start: start}
	g.waiting = append(g.waiting, gl)
	return gl, true, nil
}

// open listens on every gated listener; the gate stays closed (and open can be called again)
// until all of them listen. It reports whether this call opened the gate.
func (g *routeGate) open() (opened bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		return false, nil
	}
	var errs []error
	left := g.waiting[:0]
	for _, gl := range g.waiting {
		if err := gl.listen(); err != nil {
			errs = append(errs, err)
			left = append(left, gl)
		}
	}
	g.waiting = left
	if len(errs) > 0 {
		return false, errors.Join(errs...)
	}
	g.closed = false
	return true, nil
}

// isClosed reports whether the route does not listen yet.
func (g *routeGate) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

func (gl *gatedListener) listen() error {
	gl.mu.Lock()
	defer gl.mu.Unlock()
	if gl.stopped || gl.ln != nil {
		return nil
	}
	ln, err := gl.start(gl.bound.String())
	if err != nil {
		return fmt.Errorf("listening on %s: %w", gl.bound, err)
	}
	gl.ln = ln
	return nil
}

func (gl *gatedListener) addr() net.Addr { return gl.bound }

func (gl *gatedListener) stop(ctx context.Context) error {
	gl.mu.Lock()
	gl.stopped = true
	ln := gl.ln
	gl.mu.Unlock()
	if ln == nil {
		return nil
	}
	return ln.stop(ctx)
}
