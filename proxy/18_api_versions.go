package proxy

import (
	"encoding/binary"
	"slices"

	"github.com/kmirror/kmirror/protocol"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ApiVersions (key 18).
//
// The request is forwarded; the answer is the intersection of what upstream advertises and
// what the proxy can carry: keys kmsg does not know are dropped (the proxy cannot tell
// whether they carry addresses), keys the proxy rewrites are capped at kmsg's maximum
// version, and the mirror RPC keys are added (they are answered locally). Keys upstream
// advertises in kmirror's range are collisions (mirrorkeys.go): noted, then treated as
// Kafka's like every other upstream key, and left out of the mirror keys added.
//
// Version fallback (KIP-511): a client that sends a newer ApiVersions than the proxy knows
// gets UNSUPPORTED_VERSION with a v0 body listing ApiVersions' own range, exactly as a
// broker answers, and retries with a version both sides support. An upstream error answer
// (also v0-bodied) passes through unchanged for the same reason.

// apiVersionsFallback returns the frame answering a too-new ApiVersions request.
func apiVersionsFallback(corrID int32) []byte {
	resp := kmsg.ApiVersionsResponse{
		Version:   0,
		ErrorCode: errUnsupportedVer,
		ApiKeys:   []kmsg.ApiVersionsResponseApiKey{{ApiKey: 18, MinVersion: 0, MaxVersion: kmsgMaxVersion(18)}},
	}
	return appendResponseFrame(nil, corrID, 0, resp.AppendTo(nil))
}

func (p *Proxy) rewriteApiVersions(pr *pending, frame []byte) ([]byte, error) {
	_, body, err := splitResponse(frame, 0)
	if err != nil {
		return nil, err
	}
	if len(body) >= 2 && int16(binary.BigEndian.Uint16(body)) != 0 {
		return frame, nil
	}
	return p.reencode(pr, frame, func(r kmsg.Response) bool {
		resp := r.(*kmsg.ApiVersionsResponse)
		p.noteUpstreamKeys("an ApiVersions answer to a client", resp.ApiKeys)
		resp.ApiKeys = p.intersectAPIs(resp.ApiKeys)
		return true
	})
}

// intersectAPIs applies the proxy's limits to upstream's advertised keys and adds the mirror
// keys the proxy serves. Call noteUpstreamKeys first: a key of kmirror's range in upstream
// is Kafka's from then on.
func (p *Proxy) intersectAPIs(upstream []kmsg.ApiVersionsResponseApiKey) []kmsg.ApiVersionsResponseApiKey {
	out := make([]kmsg.ApiVersionsResponseApiKey, 0, len(upstream)+len(protocol.MirrorAPIs()))
	for _, k := range upstream {
		kmax := p.maxVersion(k.ApiKey)
		if kmax < 0 {
			continue
		}
		if p.versionCapped(k.ApiKey) && k.MaxVersion > kmax {
			k.MaxVersion = kmax
		}
		if k.MaxVersion < k.MinVersion {
			continue
		}
		out = append(out, k)
	}
	out = append(out, p.mirrorAPIKeys()...)
	slices.SortFunc(out, func(a, b kmsg.ApiVersionsResponseApiKey) int { return int(a.ApiKey) - int(b.ApiKey) })
	return out
}
