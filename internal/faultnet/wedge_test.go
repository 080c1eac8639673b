package faultnet

import (
	"net"
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// closeListener frees a proxy's port without Stop (which a wedged proxy
// may never get to), and portHolders names the listener while it holds it.
func TestCloseListenerFreesThePort(t *testing.T) {
	p := toxiproxy.NewProxy(toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()), "p", "127.0.0.1:0", "127.0.0.1:1")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Listen("tcp", p.Listen); err == nil {
		t.Fatal("the proxy's port is free while it listens")
	}
	if got := portHolders(p.Listen); !strings.Contains(got, "LISTEN") || !strings.Contains(got, "this process") {
		t.Errorf("portHolders(%s) = %q, want the listener of this process", p.Listen, got)
	}
	closeListener(p)
	ln, err := net.Listen("tcp", p.Listen)
	if err != nil {
		t.Fatalf("after closeListener: %v", err)
	}
	ln.Close()
	p.Stop()
}
