package e2e

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/kmirror/kmirror/internal/kafkatest"
)

// routeLayout is what the routes' haproxy.cfg depends on: the balancer's host, the instances'
// hosts (each serves every route on the same ports), every route's ports, and the instances'
// metrics port (the health check).
type routeLayout struct {
	Host      string
	Instances []string
	Routes    []routePorts
	Metrics   int
	Socket    string
	// ProxyProtocol: the instances expect the PROXY protocol header (proxy_protocol, which
	// routes take from the instance), so the balancer sends it.
	ProxyProtocol bool
}

// routePorts are one route's bootstrap port and broker port range (node id N on
// BrokerFirst+N).
type routePorts struct {
	Name                    string
	Bootstrap               int
	BrokerFirst, BrokerLast int
}

// routeBalancer lays out n routes, named as the test's steps, on ports free on the balancer's
// host and every instance's, with broker ports for the clusters' node ids.
func routeBalancer(t *testing.T, instances []string, host string, n int, clusters ...*kafkatest.Cluster) routeLayout {
	t.Helper()
	count := 0
	for _, c := range clusters {
		count = max(count, int(slices.Max(c.NodeIDs()))+1)
	}
	base := freePortRange(t, n*(count+1)+1, append([]string{host}, instances...)...)
	l := routeLayout{Host: host, Instances: instances, Metrics: base + n*(count+1), Socket: filepath.Join(t.TempDir(), "haproxy.sock")}
	for i := range n {
		first := base + i*(count+1)
		l.Routes = append(l.Routes, routePorts{Bootstrap: first + count, BrokerFirst: first, BrokerLast: first + count - 1})
	}
	return l
}

// routeHAProxyTemplate is docs/deploy.md's balancer for routes (TestDeployDocRouteHAProxyConfig
// keeps the two the same): one frontend and backend per route, its bootstrap and broker ports
// forwarded to the same port of a live instance.
var routeHAProxyTemplate = newHAProxyTemplate(
	`global
    stats socket {{.Socket}} mode 600 level admin

defaults
    mode tcp
    timeout connect 5s
    timeout client 11m
    timeout server 11m
    option httpchk GET /ready
    http-check expect status 200
    default-server check port {{.Metrics}} inter 1s fall 2 rise 2{{if .ProxyProtocol}} send-proxy-v2{{end}} on-marked-down shutdown-sessions
    retries 3
    option redispatch 1
{{range $r := .Routes}}
frontend {{$r.Name}}
    bind {{$.Host}}:{{$r.Bootstrap}}
    bind {{$.Host}}:{{$r.BrokerFirst}}-{{$r.BrokerLast}}
    default_backend {{$r.Name}}

backend {{$r.Name}}
    balance leastconn
{{- range $i, $h := $.Instances}}
    server kmirror-{{inc $i}} {{$h}}
{{- end}}
{{end}}`)

func routeHAProxyConfig(l routeLayout) string { return render(routeHAProxyTemplate, l) }

// docRouteLayout is the layout of docs/deploy.md's route example.
var docRouteLayout = routeLayout{Host: "0.0.0.0", Instances: []string{"kmirror-1.internal", "kmirror-2.internal", "kmirror-3.internal"},
	Routes: []routePorts{{Name: "payments", Bootstrap: 9300, BrokerFirst: 9200, BrokerLast: 9299}}, Metrics: 9464, Socket: "/run/haproxy/admin.sock", ProxyProtocol: true}

// The routes' haproxy.cfg in docs/deploy.md is the one the kill-at-each-step test runs.
func TestDeployDocRouteHAProxyConfig(t *testing.T) {
	if block, want := deployDocBlock(t, "haproxy routes"), routeHAProxyConfig(docRouteLayout); block != want {
		t.Fatalf("docs/deploy.md's haproxy.cfg for routes differs from the tested one; replace it with:\n%s", want)
	}
}
