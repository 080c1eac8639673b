package apis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"time"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// SwitchRoute (key 1011) asks for a switch of a route (docs/cutover.md). The
// instance that receives it writes a RouteRequest record; the route's driver
// (the instance owning the route's state partition, which serialises a
// route's requests) answers it in place, and the call returns that answer:
// the attempt started, or why it was refused. The switch itself goes on in
// the background; describe and the RouteSwitch record show it.

// switchAnswerWait bounds the wait for the driver's answer: it answers at
// its next look at the view, within a second, unless no instance drives
// the route (a rebalance, or every instance down but this one's proxy).
const switchAnswerWait = 20 * time.Second

// SwitchRequestExpiry is how old a request the driver still serves: the
// caller has given up on an older one (switchAnswerWait), and a switch
// starting long after its operator saw "no answer" would surprise them.
const SwitchRequestExpiry = 30 * time.Second

// SwitchRoute writes the request and waits for the driver's answer.
func (b *Backend) SwitchRoute(ctx context.Context, req *protocol.SwitchRouteRequest) *protocol.SwitchRouteResponse {
	resp := protocol.NewPtrSwitchRouteResponse()
	attempt, err := b.switchRoute(ctx, req)
	resp.Attempt = attempt
	resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(err)
	return resp
}

func (b *Backend) switchRoute(ctx context.Context, req *protocol.SwitchRouteRequest) (int32, error) {
	routes := b.routeNames()
	if !slices.Contains(routes, req.RouteName) {
		return 0, protocol.ErrInvalidRequest.WithMessage("no route %q on this kmirror (routes: %v); routes are configured in the proxy config (docs/cutover.md)", req.RouteName, routes)
	}
	if err := b.catchUp(ctx); err != nil {
		return 0, err
	}
	id := requestID()
	rec := &statetopic.RouteRequest{ID: id, Forced: req.Force, AtMs: b.now().UnixMilli()}
	if err := b.Coord.Write(ctx, coordinator.Record{Key: statetopic.RouteRequestKey(req.RouteName), Value: rec}); err != nil {
		return 0, protocol.ErrCoordinatorNotAvailable.WithMessage("recording the switch request: %v; retry", err)
	}
	b.Log.Info("route switch requested", "route", req.RouteName, "forced", req.Force, "request", id)
	ctx, cancel := context.WithTimeout(ctx, switchAnswerWait)
	defer cancel()
	store := b.Coord.Store()
	for {
		changed := store.Changed()
		var got *statetopic.RouteRequest
		store.Read(func(v *statetopic.View) { got = v.RouteRequest(req.RouteName) })
		switch {
		case got != nil && got.ID != id:
			return 0, protocol.ErrInvalidMirrorState.WithMessage("another switch request for route %q arrived before the driver answered this one; describe the route to see which switch runs", req.RouteName)
		case got != nil && got.AnsweredMs != 0 && got.Refused != "":
			return 0, protocol.ErrInvalidMirrorState.WithMessage("%s", got.Refused)
		case got != nil && got.AnsweredMs != 0:
			return got.Attempt, nil
		}
		select {
		case <-ctx.Done():
			return 0, protocol.ErrCoordinatorNotAvailable.WithMessage("no instance answered the switch request for route %q within %s: the instance owning the route's state partition drives it; is the coordinators' group stable? The request expires unanswered (a driver that reads it later refuses it); retry", req.RouteName, switchAnswerWait)
		case <-changed:
		}
	}
}

// requestID names one request (16 random bytes in hex).
func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
