package proxy

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/enforcement"
)

// rewrittenKeys are the API keys whose responses the proxy decodes and re-encodes, because
// they carry broker addresses or API versions. Their versions are capped at kmsg's maximum
// in ApiVersions (the proxy cannot rewrite what it cannot decode); every other key is
// forwarded byte for byte at whatever version upstream supports.
var rewrittenKeys = map[int16]bool{
	0:  true, // Produce: KIP-951 node endpoints
	1:  true, // Fetch: capped at v15 so that no response carries node endpoints
	3:  true, // Metadata: brokers
	10: true, // FindCoordinator: coordinator host/port
	18: true, // ApiVersions: intersection + mirror keys
	32: true, // DescribeConfigs: broker listener configs
	55: true, // DescribeQuorum: controller endpoints
	60: true, // DescribeCluster: brokers
	78: true, // ShareFetch: node endpoints
	79: true, // ShareAcknowledge: node endpoints
}

// decodedKey reports whether the proxy may decode requests or responses of
// key, so that it must cap the key's versions at what kmsg knows.
func decodedKey(key int16) bool {
	return rewrittenKeys[key] || enforcement.AdminKeys[key] || enforcement.InternalKey(key)
}

// kmsgMaxVersion is the newest version of key the proxy can decode (-1: unknown key).
func kmsgMaxVersion(key int16) int16 {
	req := kmsg.RequestForKey(key)
	if req == nil {
		return -1
	}
	return req.MaxVersion()
}

// versionCaps lowers the advertised maximum of a key below what kmsg decodes, where a newer
// version would force the proxy to hold whole responses (see 01_fetch.go).
// Produce stops at v12, the last that names topics: from v13 topics come by id, and the guard
// (enforcement) would have to resolve ids before it could see whether a Produce writes to
// kmirror's state topic or a read-only mirror topic.
var versionCaps = map[int16]int16{0: 12, 1: maxFetchVersion}

// keyVersion is what the proxy accepts of one API key: max is its newest version (-1:
// unknown key) and capped whether versions above max are refused rather than forwarded.
type keyVersion struct {
	max    int16
	capped bool
}

// versionsOf is what a proxy accepts of key, on an application route's listeners when route.
func versionsOf(key int16, route bool) keyVersion {
	kv := keyVersion{max: kmsgMaxVersion(key), capped: decodedKey(key) || versionCaps[key] != 0}
	if c, ok := versionCaps[key]; ok {
		kv.max = min(kv.max, c)
	}
	if c, ok := routeVersionCaps[key]; ok && route {
		kv.max, kv.capped = min(kv.max, c), true
	}
	return kv
}

// versionTable is versionsOf for keys 0..255, on a plain proxy ([0]) and on an application
// route's ([1]). Every request is checked against it (answerLocally), so it is computed
// once: kmsg.RequestForKey allocates a request, and the caps are maps.
var versionTable = sync.OnceValue(func() *[2][256]keyVersion {
	var t [2][256]keyVersion
	for key := range int16(256) {
		t[0][key], t[1][key] = versionsOf(key, false), versionsOf(key, true)
	}
	return &t
})

// versionsFor is versionsOf, from the table where it has the key.
func versionsFor(key int16, route bool) keyVersion {
	if key < 0 || key >= 256 {
		return versionsOf(key, route) // beyond Kafka's keys: kmirror's range is answered before
	}
	if route {
		return versionTable()[1][key]
	}
	return versionTable()[0][key]
}

// maxVersion is the newest version of key the proxy advertises and accepts (-1: unknown).
func maxVersion(key int16) int16 { return versionsFor(key, false).max }

// versions is what this proxy accepts of key: a route (route.go) caps or hides the keys that
// address topics by id.
func (p *Proxy) versions(key int16) keyVersion { return versionsFor(key, p.appRoute != nil) }

// maxVersion is maxVersion for this proxy (versions).
func (p *Proxy) maxVersion(key int16) int16 { return p.versions(key).max }

// versionCapped reports whether the proxy advertises and accepts key only up to
// p.maxVersion (otherwise upstream's versions pass).
func (p *Proxy) versionCapped(key int16) bool { return p.versions(key).capped }

// needsRewrite reports whether the response to key@version may carry broker addresses or
// API versions and must therefore be read whole and decoded.
func needsRewrite(key, version int16) bool {
	switch key {
	case 0:
		return version >= 10
	case 1:
		return false // capped below v16 (01_fetch.go)
	}
	return rewrittenKeys[key]
}

// rewriteResponse rewrites a whole response frame (with size prefix) answering pr; the
// caller checked the correlation id.
func (p *Proxy) rewriteResponse(pr *pending, frame []byte) ([]byte, error) {
	if len(frame) < 8 {
		return nil, fmt.Errorf("truncated %s response", kmsg.NameForKey(pr.key))
	}
	var fn func(kmsg.Response) bool
	switch pr.key {
	case 0:
		switch {
		case pr.merge != nil:
			merge := mergeRefused(pr)
			fn = func(r kmsg.Response) bool { p.rewriteProduce(r); return merge(r) }
		case pr.version < 10:
			return frame, nil
		default:
			if _, body, err := splitResponse(frame, responseHeaderVersion(pr.key, pr.version)); err == nil && !produceNodeEndpoints(body, pr.version) {
				return frame, nil
			}
			fn = p.rewriteProduce
		}
	case 3:
		fn = p.rewriteMetadata
	case 10:
		fn = p.rewriteFindCoordinator
	case 18:
		return p.rewriteApiVersions(pr, frame)
	case 32:
		fn = func(r kmsg.Response) bool {
			changed := p.rewriteDescribeConfigs(r)
			if g := p.guard.Load(); g != nil && g.DecorateDescribeConfigs(r.(*kmsg.DescribeConfigsResponse)) {
				changed = true
			}
			return changed
		}
	case 55:
		fn = p.rewriteDescribeQuorum
	case 60:
		fn = p.rewriteDescribeCluster
	case 78:
		fn = p.rewriteShareFetch
	case 79:
		fn = p.rewriteShareAcknowledge
	default:
		return frame, nil
	}
	return p.reencode(pr, frame, fn)
}

// unsafeReader is implemented by every kmsg response: decoding aliases the frame instead of
// copying strings and record bytes, which is safe because the frame outlives the response.
type unsafeReader interface{ UnsafeReadFrom([]byte) error }

// reencode decodes the response, lets fn rewrite it, and re-encodes it when fn changed it.
func (p *Proxy) reencode(pr *pending, frame []byte, fn func(kmsg.Response) bool) ([]byte, error) {
	hv := responseHeaderVersion(pr.key, pr.version)
	_, body, err := splitResponse(frame, hv)
	if err != nil {
		return nil, err
	}
	resp := kmsg.ResponseForKey(pr.key)
	resp.SetVersion(pr.version)
	if err := resp.(unsafeReader).UnsafeReadFrom(body); err != nil {
		return nil, fmt.Errorf("decoding %s v%d response: %w", kmsg.NameForKey(pr.key), pr.version, err)
	}
	if !fn(resp) {
		return frame, nil
	}
	out := make([]byte, 0, len(frame)+64)
	out = append(out, 0, 0, 0, 0)
	out = binary.BigEndian.AppendUint32(out, uint32(pr.corrID))
	if hv >= 1 {
		out = append(out, 0)
	}
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out, nil
}

// rewriteNodes gives every node of a response's broker list the proxy's endpoint for it and
// drops the nodes the proxy has no port for (hidden, never leaked). The lists differ in type
// per API; addr names a node's id, host and port.
func rewriteNodes[N any](p *Proxy, nodes []N, addr func(*N) (id int32, host *string, port *int32)) []N {
	kept := nodes[:0]
	for _, n := range nodes {
		if p.endpoint(addr(&n)) {
			kept = append(kept, n)
		}
	}
	return kept
}

// rewriteNodesIfAny rewrites a node list that responses carry only when something changed
// (KIP-951 new leaders, KIP-932 share leaders); it reports whether there was one.
func rewriteNodesIfAny[N any](p *Proxy, nodes *[]N, addr func(*N) (id int32, host *string, port *int32)) bool {
	if len(*nodes) == 0 {
		return false
	}
	*nodes = rewriteNodes(p, *nodes, addr)
	return true
}

// endpoint rewrites one broker endpoint in place; false means the broker must be hidden.
func (p *Proxy) endpoint(node int32, host *string, port *int32) bool {
	adv, ok := p.advertise(node, *host, *port)
	if !ok {
		return false
	}
	*host, *port = p.cfg.AdvertisedHost, adv
	return true
}
