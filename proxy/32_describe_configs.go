package proxy

import (
	"net"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeConfigs (key 32): a broker resource lists the broker's own listener configs, which
// spell out real addresses. listeners and advertised.listeners (and their synonyms) are
// replaced with the proxy's endpoint for that broker, keeping each listener's name; the
// controller quorum addresses are blanked and marked sensitive, as passwords are. Topic and
// other resources pass unchanged; a response without broker resources is not re-encoded.

var listenerConfigs = map[string]bool{"listeners": true, "advertised.listeners": true}

var controllerAddressConfigs = map[string]bool{
	"controller.quorum.voters":            true,
	"controller.quorum.bootstrap.servers": true,
}

func (p *Proxy) rewriteDescribeConfigs(r kmsg.Response) bool {
	resp := r.(*kmsg.DescribeConfigsResponse)
	changed := false
	for i := range resp.Resources {
		res := &resp.Resources[i]
		if res.ResourceType != kmsg.ConfigResourceTypeBroker {
			continue
		}
		endpoint := p.brokerEndpoint(res.ResourceName)
		for j := range res.Configs {
			c := &res.Configs[j]
			switch {
			case listenerConfigs[c.Name]:
				c.Value = rewriteListeners(c.Value, endpoint)
				for k := range c.ConfigSynonyms {
					c.ConfigSynonyms[k].Value = rewriteListeners(c.ConfigSynonyms[k].Value, endpoint)
				}
				changed = true
			case controllerAddressConfigs[c.Name]:
				c.Value, c.IsSensitive = nil, true
				for k := range c.ConfigSynonyms {
					c.ConfigSynonyms[k].Value = nil
				}
				changed = true
			}
		}
	}
	return changed
}

// brokerEndpoint is the proxy's host:port for the broker named by a config resource (a node
// id; empty names the cluster default and gets the bootstrap address).
func (p *Proxy) brokerEndpoint(resourceName string) string {
	if id, err := strconv.ParseInt(resourceName, 10, 32); err == nil {
		if port, ok := p.BrokerListenerPorts()[int32(id)]; ok {
			return net.JoinHostPort(p.cfg.AdvertisedHost, strconv.Itoa(port))
		}
	}
	return p.AdvertisedAddr()
}

// rewriteListeners replaces the address of every NAME://host:port entry with endpoint.
func rewriteListeners(v *string, endpoint string) *string {
	if v == nil || *v == "" {
		return v
	}
	parts := strings.Split(*v, ",")
	for i, l := range parts {
		name, _, ok := strings.Cut(strings.TrimSpace(l), "://")
		if !ok {
			name = "PLAINTEXT"
		}
		parts[i] = name + "://" + endpoint
	}
	out := strings.Join(parts, ",")
	return &out
}
