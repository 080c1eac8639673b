package proxy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseArgsFileThenFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "proxy.yaml")
	yaml := `
upstream: [b1:9092, b2:9092]
listen: 0.0.0.0:19092
advertised_host: lb.example.com
broker_port_base: 20000
broker_ports: {1001: 21001}
max_in_flight: 7
idle_timeout: 90s
tls: {cert_file: c.pem, key_file: k.pem}
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseArgs("proxy", []string{"--config", file, "--max-in-flight", "9", "--broker-ports", "30000+50"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Upstream, ","); got != "b1:9092,b2:9092" {
		t.Errorf("upstream %q", got)
	}
	if cfg.MaxInFlight != 9 {
		t.Errorf("flag did not override file: max_in_flight %d", cfg.MaxInFlight)
	}
	if cfg.IdleTimeout != 90*time.Second || cfg.AdvertisedHost != "lb.example.com" || cfg.Listen != "0.0.0.0:19092" {
		t.Errorf("file values lost: %+v", cfg)
	}
	if cfg.MaxFrameBytes != 100<<20 {
		t.Errorf("default max frame %d", cfg.MaxFrameBytes)
	}
	for node, want := range map[int32]int{0: 30000, 3: 30003, 49: 30049, 1001: 21001} {
		if got, ok := cfg.brokerPort(node); !ok || got != want {
			t.Errorf("node %d: port %d %v, want %d", node, got, ok, want)
		}
	}
	if _, ok := cfg.brokerPort(50); ok {
		t.Error("node 50 is outside 30000+50 and must have no port")
	}
}

func TestParseArgsErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(bad, []byte("upstream: [a:1]\nno_such_key: 1\n"), 0o600)
	engine := filepath.Join(dir, "engine.yaml")
	_ = os.WriteFile(engine, []byte("upstream: [a:1]\nplaintext_engine: epoll\n"), 0o600)
	for name, args := range map[string][]string{
		"no upstream":      {},
		"bad upstream":     {"--upstream", "nohost"},
		"unknown yaml key": {"--config", bad},
		"missing file":     {"--config", filepath.Join(dir, "absent.yaml")},
		"bad port range":   {"--upstream", "a:1", "--broker-ports", "65500+100"},
		"bad ports flag":   {"--upstream", "a:1", "--broker-ports", "x"},
		"cert without key": {"--upstream", "a:1", "--tls-cert", "c.pem"},
		"stray argument":   {"--upstream", "a:1", "extra"},
		"unknown engine":   {"--config", engine},
	} {
		if _, err := ParseArgs("proxy", args); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestUpstreamSASLConfig(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		yaml string
		ok   bool
	}{
		"scram":                      {"upstream_sasl: {mechanism: SCRAM-SHA-512, username: kmirror, password: pw-marker-91}\n", true},
		"plain lower case":           {"upstream_sasl: {mechanism: plain, username: kmirror, password: pw-marker-91}\n", true},
		"unknown mechanism":          {"upstream_sasl: {mechanism: GSSAPI, username: kmirror, password: pw-marker-91}\n", false},
		"mechanism without user":     {"upstream_sasl: {mechanism: PLAIN, password: pw-marker-91}\n", false},
		"mechanism without password": {"upstream_sasl: {mechanism: PLAIN, username: kmirror}\n", false},
		"user without mechanism":     {"upstream_sasl: {username: kmirror, password: pw-marker-91}\n", false},
	} {
		file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		if err := os.WriteFile(file, []byte("upstream: [a:1]\n"+c.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := ParseArgs("proxy", []string{"--config", file})
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok=%v", name, err, c.ok)
		}
		if err != nil && strings.Contains(err.Error(), "pw-marker-91") {
			t.Errorf("%s: the error shows the password: %v", name, err)
		}
		if err == nil && strings.Contains(fmt.Sprintf("%v %+v", cfg, cfg), "pw-marker-91") {
			t.Errorf("%s: the printed config shows the password: %+v", name, cfg)
		}
	}
}

func TestAdvertisedHostDefault(t *testing.T) {
	for listen, want := range map[string]string{"0.0.0.0:9092": "localhost", ":9092": "localhost", "10.1.2.3:9092": "10.1.2.3"} {
		cfg := Config{Upstream: []string{"a:1"}, Listen: listen}.withDefaults()
		if cfg.AdvertisedHost != want {
			t.Errorf("listen %s: advertised host %q, want %q", listen, cfg.AdvertisedHost, want)
		}
	}
}

func TestFramePool(t *testing.T) {
	for _, n := range []int{1, 4096, 4097, 1 << 20, 3<<20 + 5} {
		b := getFrame(n)
		if len(b) != n || cap(b) < n {
			t.Fatalf("getFrame(%d): len %d cap %d", n, len(b), cap(b))
		}
		putFrame(b)
	}
	putFrame(make([]byte, 5000)) // not a pool size: ignored, must not be handed out short
	if b := getFrame(8000); cap(b) < 8000 {
		t.Fatalf("pool returned a buffer of cap %d for 8000 bytes", cap(b))
	}
}

// TestFramePoolRecyclesWithoutAllocating: a frame's round trip through the pool allocates
// nothing once the pool holds it; the pool stored a slice header per put before (an
// allocation per forwarded request, bench/README.md, Proxy).
func TestFramePoolRecyclesWithoutAllocating(t *testing.T) {
	putFrame(getFrame(10 << 10))
	if n := testing.AllocsPerRun(1000, func() { putFrame(getFrame(10 << 10)) }); n != 0 {
		t.Fatalf("%v allocations per getFrame/putFrame round trip, want 0", n)
	}
	b := getFrame(5000)
	b[0], b[4999] = 1, 2
	putFrame(b)
	c := getFrame(6000)
	if cap(c) != 8192 || len(c) != 6000 {
		t.Fatalf("a recycled 8 KiB frame came back with len %d cap %d", len(c), cap(c))
	}
}
