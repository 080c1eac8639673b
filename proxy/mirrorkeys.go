package proxy

import (
	"context"
	"fmt"
	"math/bits"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/protocol"
)

// Collisions with kmirror's key range (protocol/apikeys.go, docs/proxy.md "Mirror RPC keys").
//
// kmirror answers the mirror RPCs itself at keys Kafka has not assigned. Should a destination
// ever advertise one of them, that key is Kafka's on this destination: the proxy logs an
// ERROR naming it and stops serving it as a mirror RPC for the rest of the process's life, so
// that a Kafka request is never answered with a mirror response. From then on the key
// follows the rules of every Kafka key: forwarded if the proxy can carry it (kmsg knows it),
// otherwise neither advertised nor accepted. The check runs on every upstream ApiVersions
// answer passing through the proxy and at start-up (and each discovery round) on the
// proxy's own connections.
//
// The set is a bit per mirror-table entry, read on every request without a lock. A key once
// seen colliding stays so: brokers of one cluster may differ during a rolling upgrade, and a
// client may talk to any of them.

// servesMirrorKey reports whether the proxy answers key itself as a mirror RPC.
func (p *Proxy) servesMirrorKey(key int16) bool {
	i := protocol.MirrorKeyIndex(key)
	return i >= 0 && p.collidingKeys.Load()&(1<<i) == 0
}

// noteUpstreamKeys records the keys in kmirror's range that an upstream ApiVersions answer
// advertises and logs an ERROR for those not seen before. from names the answer's origin.
func (p *Proxy) noteUpstreamKeys(from string, keys []kmsg.ApiVersionsResponseApiKey) {
	var found uint32
	for _, k := range keys {
		if i := protocol.MirrorKeyIndex(k.ApiKey); i >= 0 {
			found |= 1 << i
		}
	}
	if found == 0 {
		return
	}
	for {
		old := p.collidingKeys.Load()
		added := found &^ old
		if added == 0 {
			return
		}
		if p.collidingKeys.CompareAndSwap(old, old|found) {
			p.log.Error("the destination advertises API keys in kmirror's mirror RPC range; kmirror no longer serves them and treats them as Kafka's",
				"keys", describeKeys(added), "from", from, "range", protocol.MirrorKeyRange())
			return
		}
	}
}

// describeKeys names the keys of a collision bit set: "1000 (CreateMirror), 1004 (ListMirrors)".
func describeKeys(set uint32) string {
	apis := protocol.MirrorAPIs()
	var out []string
	for set != 0 {
		i := bits.TrailingZeros32(set)
		set &^= 1 << i
		out = append(out, fmt.Sprintf("%d (%s)", apis[i].Key, apis[i].Name))
	}
	return strings.Join(out, ", ")
}

// checkUpstreamKeys asks every upstream broker for its ApiVersions through the discovery
// client and notes collisions. Errors are returned for the caller to log: the check repeats
// on every ApiVersions answer clients receive through the proxy.
func (p *Proxy) checkUpstreamKeys(ctx context.Context, adm *kadm.Client) error {
	vs, err := adm.ApiVersions(ctx)
	if err != nil {
		return fmt.Errorf("asking upstream brokers for ApiVersions: %w", err)
	}
	var errs []string
	for _, v := range vs.Sorted() {
		if v.Err != nil {
			errs = append(errs, fmt.Sprintf("broker %d: %v", v.NodeID, v.Err))
			continue
		}
		p.noteUpstreamKeys(fmt.Sprintf("broker %d (start-up and discovery check)", v.NodeID), v.Raw().ApiKeys)
	}
	if len(errs) > 0 {
		return fmt.Errorf("asking upstream brokers for ApiVersions: %s", strings.Join(errs, "; "))
	}
	return nil
}
