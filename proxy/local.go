package proxy

import (
	"context"
	"fmt"
	"reflect"

	"github.com/kmirror/kmirror/internal/audit"
	"github.com/kmirror/kmirror/protocol"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// answerLocally decides whether the proxy answers a request itself. It returns a channel
// that will carry the complete response frame, nil to forward the request, or an error when
// the request is not acceptable and the connection must close (as a broker would do for an
// unknown key or unsupported version).
func (p *Proxy) answerLocally(s *session, h requestHeader, frame []byte) (chan []byte, error) {
	if p.servesMirrorKey(h.key) {
		return p.answerMirror(s, h, frame), nil
	}
	kv := p.versions(h.key)
	kmax := kv.max
	switch {
	case kmax < 0 && protocol.IsMirrorKey(h.key):
		return nil, fmt.Errorf("API key %d (v%d) is the destination's own here, not kmirror's %s: it collides with kmirror's range %s, "+
			"and the proxy cannot forward a key it does not know", h.key, h.version, protocol.APIName(h.key), protocol.MirrorKeyRange())
	case h.key == 18 && h.version > kmax:
		ch := make(chan []byte, 1)
		ch <- apiVersionsFallback(h.corrID)
		return ch, nil
	case kmax < 0:
		return nil, fmt.Errorf("unknown API key %d (v%d): not advertised by this proxy", h.key, h.version)
	case kv.capped && h.version > kmax:
		return nil, fmt.Errorf("%s v%d is newer than this proxy supports (max v%d) and was not advertised", kmsg.NameForKey(h.key), h.version, kmax)
	}
	if p.appRoute != nil && p.appRoute.hold.Load() != nil { // a switch in either direction
		switch h.key {
		case 1:
			return s.holdFetch(h, frame)
		case 8, 28:
			return s.holdCommit(h, frame)
		}
	}
	if h.key == 32 || h.key == 44 {
		if fn := p.configResources.Load(); fn != nil {
			if answer, ok := (*fn)(h.key, h.version, frame[4+h.bodyOff:]); ok {
				return p.answerConfigs(s, h, frame[4+h.bodyOff:], answer), nil
			}
		}
	}
	return nil, nil
}

// ConfigResourceHandler takes DescribeConfigs (32) and
// IncrementalAlterConfigs (44) requests that name config resources a broker
// does not know (kmirror's mirror configs, resource type 64): ok reports
// whether it answers the request, and answer runs off the event loop.
type ConfigResourceHandler func(key, version int16, body []byte) (answer func(ctx context.Context) kmsg.Response, ok bool)

// SetConfigResources installs the handler of kmirror's own config resources.
func (p *Proxy) SetConfigResources(fn ConfigResourceHandler) { p.configResources.Store(&fn) }

func (p *Proxy) answerConfigs(s *session, h requestHeader, body []byte, answer func(ctx context.Context) kmsg.Response) chan []byte {
	ch := make(chan []byte, 1)
	subj := configSubject(h.key, h.version, body)
	decided := s.authorize(h.key, configRequirements[h.key], subj)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		var resp kmsg.Response
		if d := decided(s.ctx); !d.allowed {
			d.code = configRefusalCode(d)
			s.authzRefused(h.key, subj, d)
			resp = configRefusal(h.key, h.version, body, d.code, d.message)
		} else {
			resp = answer(s.ctx)
			s.audit(h.key, subj, audit.Allowed, d.principal, d.reason, 0)
		}
		resp.SetVersion(h.version)
		ch <- appendResponseFrame(nil, h.corrID, responseHeaderVersion(h.key, h.version), resp.AppendTo(nil))
	}()
	return ch
}

// answerMirror runs the mirror RPC handler off the client's goroutine, once the client is
// authorised for it (authz.go); the response FIFO keeps the answer in request order.
func (p *Proxy) answerMirror(s *session, h requestHeader, frame []byte) chan []byte {
	ch := make(chan []byte, 1)
	fn := p.Handlers.lookup(h.key)
	switch {
	case h.version != 0:
		ch <- appendResponseFrame(nil, h.corrID, 1, mirrorErrorBody(h.key, errUnsupportedVer,
			fmt.Sprintf("mirror API key %d supports version 0 only, got v%d", h.key, h.version)))
		return ch
	case fn == nil:
		msg := mirroringDisabledMessage
		if p.appRoute != nil {
			msg = fmt.Sprintf("this is a listener of route %s, which leads to the route's upstream cluster: mirror RPCs are served on kmirror's own listener", p.appRoute.name)
		}
		ch <- appendResponseFrame(nil, h.corrID, 1, mirrorErrorBody(h.key, errInvalidRequest, msg))
		return ch
	}
	body := frame[4+h.bodyOff:]
	subj := mirrorSubject(h.key, h.version, body)
	decided := s.authorize(h.key, mirrorRequirements[h.key], subj)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		d := decided(s.ctx)
		if !d.allowed {
			s.authzRefused(h.key, subj, d)
			ch <- appendResponseFrame(nil, h.corrID, 1, mirrorErrorBody(h.key, d.code, d.message))
			return
		}
		wantNames := true
		if d.filter != nil && h.key == protocol.KeyListMirrors {
			body, wantNames = withTopicNames(h.version, body)
		}
		req := &MirrorRequest{Key: h.key, Version: h.version, CorrelationID: h.corrID,
			Body: body, ClientAddr: s.client.remoteAddr(), Principal: d.principal}
		var out []byte
		var code int16
		resp, err := fn(s.ctx, req)
		switch {
		case err != nil:
			var msg *string
			code, msg = protocol.ErrorCodeAndMessage(err)
			out = mirrorErrorBody(h.key, code, *msg)
		case resp == nil:
			code = errInvalidRequest
			out = mirrorErrorBody(h.key, code, "mirror handler returned no response")
		default:
			if d.filter != nil {
				filterTopics(resp, d.filter, wantNames)
			}
			resp.SetVersion(h.version)
			code = topErrorCode(resp)
			out = resp.AppendTo(nil)
		}
		s.audit(h.key, subj, audit.Allowed, d.principal, d.reason, code)
		ch <- appendResponseFrame(nil, h.corrID, 1, out)
	}()
	return ch
}

// topErrorCode is a mirror response's top-level error code (every one has ErrorCode).
func topErrorCode(resp kmsg.Response) int16 {
	v := reflect.ValueOf(resp)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return 0
	}
	if f := v.Elem().FieldByName("ErrorCode"); f.IsValid() && f.CanInt() {
		return int16(f.Int())
	}
	return 0
}
