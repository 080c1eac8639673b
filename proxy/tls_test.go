package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/internal/tlstest"
)

// testPKI is a throwaway CA with one server and one client certificate, written as PEM files.
type testPKI struct {
	dir                           string
	caFile, serverCert, serverKey string
	clientCert, clientKey         string
	pool                          *x509.CertPool
	server, client                tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "kmirror test CA")
	p := &testPKI{dir: dir, pool: ca.Pool()}
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	p.caFile = write("ca.pem", ca.PEM)
	leaf := func(usage x509.ExtKeyUsage, name string) (string, string, tls.Certificate) {
		certPEM, keyPEM := ca.Issue(t, name, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}, usage)
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", certPEM), write(name+"-key.pem", keyPEM), cert
	}
	p.serverCert, p.serverKey, p.server = leaf(x509.ExtKeyUsageServerAuth, "server")
	p.clientCert, p.clientKey, p.client = leaf(x509.ExtKeyUsageClientAuth, "client")
	return p
}

// tlsDialer wraps the recorder's dial in TLS (kgo does not combine Dialer and DialTLSConfig).
func (d *dialRecorder) tlsDial(cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			return nil, err
		}
		return tc, nil
	}
}

func TestTLSClientListener(t *testing.T) {
	pki := newTestPKI(t)
	c := startKfake(t, 3)
	p := startProxy(t, c.ListenAddrs(), func(cfg *Config) {
		cfg.TLS = ListenerTLS{CertFile: pki.serverCert, KeyFile: pki.serverKey}
	})
	var d dialRecorder
	produceConsume(t, p.AdvertisedAddr(), &d, 500, kgo.Dialer(d.tlsDial(&tls.Config{RootCAs: pki.pool})))
	largeRoundTrip(t, p, kgo.Dialer(d.tlsDial(&tls.Config{RootCAs: pki.pool})))
	assertOnlyProxyDialed(t, p, &d)

	// A plaintext client gets no Kafka answer from a TLS listener.
	conn := rawDial(t, p.Addr())
	_, _ = conn.Write(kmsg.NewRequestFormatter().AppendRequest(nil, kmsg.NewPtrMetadataRequest(), 1))
	expectClosed(t, conn, "plaintext client on TLS listener")
}

func TestTLSMutualAuth(t *testing.T) {
	pki := newTestPKI(t)
	c := startKfake(t, 1)
	p := startProxy(t, c.ListenAddrs(), func(cfg *Config) {
		cfg.TLS = ListenerTLS{CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: pki.caFile}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var d dialRecorder
	conn, err := d.tlsDial(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}})(ctx, "tcp", p.Addr())
	if err != nil {
		t.Fatalf("mutual TLS handshake: %v", err)
	}
	defer conn.Close()
	metadataRoundTrip(t, conn, 1)

	// Without a client certificate: TLS 1.3 may complete the client side of the handshake and
	// report the refusal on the first read; either way no Kafka answer may come back.
	noCert, err := d.tlsDial(&tls.Config{RootCAs: pki.pool})(ctx, "tcp", p.Addr())
	if err == nil {
		defer noCert.Close()
		_, _ = noCert.Write(kmsg.NewRequestFormatter().AppendRequest(nil, kmsg.NewPtrMetadataRequest(), 1))
		_ = noCert.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := readFrame(noCert, 1<<20); err == nil {
			t.Fatal("client without certificate got an answer")
		}
	}
}

// TestTLSAndSASLToBrokers: the proxy speaks TLS to the brokers, and the client's SASL
// exchange (PLAIN and SCRAM) passes through the 1:1 connection unchanged.
func TestTLSAndSASLToBrokers(t *testing.T) {
	pki := newTestPKI(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(3),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pki.server}}),
		kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "admin", "admin-secret"),
		kfake.Superuser("SCRAM-SHA-256", "scram", "scram-secret"),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	p := startProxy(t, kc.ListenAddrs()[:1], func(cfg *Config) {
		cfg.UpstreamTLS = UpstreamTLS{Enabled: true, CAFile: pki.caFile}
		// No UpstreamSASL: the proxy cannot discover brokers itself and learns them from the
		// Metadata the authenticated clients fetch.
	})
	if n := len(p.BrokerListenerPorts()); n != 0 {
		t.Fatalf("proxy without credentials discovered %d brokers", n)
	}
	for _, mech := range []kgo.Opt{
		kgo.SASL(plain.Auth{User: "admin", Pass: "admin-secret"}.AsMechanism()),
		kgo.SASL(scram.Auth{User: "scram", Pass: "scram-secret"}.AsSha256Mechanism()),
	} {
		var d dialRecorder
		produceConsume(t, p.AdvertisedAddr(), &d, 200, mech)
		assertOnlyProxyDialed(t, p, &d)
	}

	// Wrong credentials fail authentication end to end.
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.AdvertisedAddr()),
		kgo.SASL(plain.Auth{User: "admin", Pass: "wrong"}.AsMechanism()), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.Ping(ctx); err == nil {
		t.Fatal("wrong SASL password accepted through the proxy")
	}

	// With its own credentials the proxy discovers every broker at start.
	p2 := startProxy(t, kc.ListenAddrs()[:1], func(cfg *Config) {
		cfg.UpstreamTLS = UpstreamTLS{Enabled: true, CAFile: pki.caFile}
		cfg.UpstreamSASL = UpstreamSASL{Mechanism: "SCRAM-SHA-256", Username: "scram", Password: "scram-secret"}
	})
	if n := len(p2.BrokerListenerPorts()); n != 3 {
		t.Fatalf("proxy with credentials discovered %d brokers, want 3", n)
	}
}

// A destination that requires SASL, and no upstream_sasl: discovery fails with an error that
// says what to set (kmirror's own clients would otherwise only retry quietly).
func TestDiscoveryWithoutUpstreamSASLSaysWhatToSet(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("PLAIN", "admin", "admin-secret"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	p, err := New(Config{Upstream: kc.ListenAddrs(), Listen: "127.0.0.1:0", DialTimeout: 5 * time.Second}, WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	err = p.discover(context.Background())
	if err == nil || !strings.Contains(err.Error(), "set upstream_sasl") {
		t.Fatalf("discovery without credentials: %v, want a hint to set upstream_sasl", err)
	}
	// With credentials discovery works (TestTLSAndSASLToBrokers); with credentials that fail,
	// the hint would mislead and is not given.
	p.up.Store(&upstreamSet{bootstrap: kc.ListenAddrs(), sasl: UpstreamSASL{Mechanism: "PLAIN", Username: "admin", Password: "wrong"}})
	if err := p.discover(context.Background()); err == nil || strings.Contains(err.Error(), "set upstream_sasl") {
		t.Fatalf("discovery with wrong credentials: %v, want an error without the hint", err)
	}
}
