package clientopts

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/tlstest"
)

// pki is a CA with a broker certificate for kafka.example and a client
// certificate, plus a CA that signed neither.
type pki struct {
	ca, other         *tlstest.CA
	srvCert, srvKey   []byte
	cliCert, cliKey   []byte
	caFile, otherFile string
	cliCertF, cliKeyF string
}

func newPKI(t *testing.T) *pki {
	p := &pki{ca: tlstest.NewCA(t, "clientopts CA"), other: tlstest.NewCA(t, "someone else")}
	p.srvCert, p.srvKey = p.ca.Issue(t, "broker", []string{"kafka.example"}, nil, x509.ExtKeyUsageServerAuth)
	p.cliCert, p.cliKey = p.ca.Issue(t, "ops", nil, nil, x509.ExtKeyUsageClientAuth)
	p.caFile = writeFile(t, "ca.pem", p.ca.PEM)
	p.otherFile = writeFile(t, "other.pem", p.other.PEM)
	p.cliCertF = writeFile(t, "client.pem", p.cliCert)
	p.cliKeyF = writeFile(t, "client.key", p.cliKey)
	return p
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// handshake runs a TLS handshake over loopback between a client with cfg
// and a broker that requires a client certificate signed by the CA; it
// returns the client's error. (A net.Pipe deadlocks when both sides write
// at once, as a failing client's alert and the server's flight do.)
func (p *pki) handshake(t *testing.T, cfg *tls.Config) error {
	t.Helper()
	pair, err := tls.X509KeyPair(p.srvCert, p.srvKey)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: p.ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if s, err := ln.Accept(); err == nil {
			_ = s.SetDeadline(time.Now().Add(time.Minute))
			_ = s.(*tls.Conn).Handshake()
			// TLS 1.3 reports a refused client certificate at the first read.
			_, _ = s.Write([]byte{0})
			_ = s.Close()
		}
	}()
	d := tls.Dialer{Config: cfg, NetDialer: &net.Dialer{Timeout: time.Minute}}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		_, err = c.Read(make([]byte, 1))
		_ = c.Close()
	}
	<-done
	return err
}

func TestTLSVerify(t *testing.T) {
	p := newPKI(t)
	mtls := func(ca string, v Verify, serverName string) *TLS {
		return &TLS{
			CA:   PEM{Name: "ca", File: ca},
			Cert: PEM{Name: "cert", File: p.cliCertF}, Key: PEM{Name: "key", File: p.cliKeyF},
			ServerName: serverName, Verify: v,
		}
	}
	for _, tc := range []struct {
		name string
		tls  *TLS
		want string // "" = the handshake succeeds
	}{
		{"full, right name", mtls(p.caFile, VerifyFull, "kafka.example"), ""},
		{"full, host dialled is not in the certificate", mtls(p.caFile, VerifyFull, ""), "127.0.0.1"},
		{"full, wrong CA", mtls(p.otherFile, VerifyFull, "kafka.example"), "unknown authority"},
		{"chain only skips the host name", mtls(p.caFile, VerifyChain, ""), ""},
		{"chain only still checks the chain", mtls(p.otherFile, VerifyChain, ""), "unknown authority"},
		{"none checks nothing", mtls(p.otherFile, VerifyNone, ""), ""},
		{"inline PEM", &TLS{CA: PEM{Data: p.ca.PEM}, Cert: PEM{Data: p.cliCert}, Key: PEM{Data: p.cliKey}, ServerName: "kafka.example"}, ""},
		{"no client certificate", &TLS{CA: PEM{File: p.caFile}, ServerName: "kafka.example"}, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.tls.Config()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.MinVersion != tls.VersionTLS12 {
				t.Errorf("MinVersion = %x, want TLS 1.2", cfg.MinVersion)
			}
			err = p.handshake(t, cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("handshake: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("handshake error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestTLSConfigErrors(t *testing.T) {
	p := newPKI(t)
	notPEM := writeFile(t, "not.pem", []byte("hello"))
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		name string
		tls  TLS
		want string
	}{
		{"missing CA file", TLS{CA: PEM{Name: "ssl.ca.location", File: missing}}, "ssl.ca.location: open " + missing},
		{"CA file without PEM", TLS{CA: PEM{Name: "ssl.ca.location", File: notPEM}}, "ssl.ca.location " + notPEM + " holds no PEM certificate"},
		{"inline CA without PEM", TLS{CA: PEM{Name: "the CA certificates", Data: []byte("x")}}, "the CA certificates holds no PEM certificate"},
		{"certificate without key", TLS{Cert: PEM{Name: "c", File: p.cliCertF}, Key: PEM{Name: "k"}}, "c/k: the client certificate and key must be set together"},
		{"key without certificate", TLS{Cert: PEM{Name: "c"}, Key: PEM{Name: "k", File: p.cliKeyF}}, "must be set together"},
		{"missing key file", TLS{Cert: PEM{Name: "c", File: p.cliCertF}, Key: PEM{Name: "k", File: missing}}, "k: open " + missing},
		{"key of another certificate", TLS{Cert: PEM{Name: "c", File: p.cliCertF}, Key: PEM{Name: "k", Data: p.srvKey}}, "c/k: tls: private key does not match public key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.tls.Config()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if _, err := (Config{TLS: &tc.tls}).Options(); err == nil {
				t.Fatal("Options took a TLS config that does not load")
			}
		})
	}
}

func TestSASL(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "scram-sha-512"} {
		m, err := SASL{Mechanism: mech, User: "u", Pass: "p"}.Auth()
		if err != nil {
			t.Fatalf("%s: %v", mech, err)
		}
		if m.Name() != strings.ToUpper(mech) {
			t.Errorf("%s: mechanism %s", mech, m.Name())
		}
	}
	_, err := SASL{Mechanism: "GSSAPI"}.Auth()
	if err == nil || !strings.Contains(err.Error(), `"GSSAPI" is not supported`) || !strings.Contains(err.Error(), "SCRAM-SHA-512") {
		t.Fatalf("unknown mechanism: %v", err)
	}
	if _, err := (Config{SASL: &SASL{Mechanism: "GSSAPI"}}).Options(); err == nil {
		t.Fatal("Options took an unknown mechanism")
	}
	if s := (SASL{Mechanism: "PLAIN", User: "alice", Pass: "hunter2"}).String(); strings.Contains(s, "hunter2") || !strings.Contains(s, "alice") {
		t.Fatalf("String() = %s", s)
	}
}

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		want int
	}{
		{"plaintext", Config{}, 0},
		{"TLS", Config{TLS: &TLS{}}, 1},
		{"SASL", Config{SASL: &SASL{Mechanism: "PLAIN"}}, 1},
		{"TLS and SASL", Config{TLS: &TLS{}, SASL: &SASL{Mechanism: "SCRAM-SHA-256"}}, 2},
	} {
		opts, err := tc.c.Options()
		if err != nil || len(opts) != tc.want {
			t.Errorf("%s: %d options, %v; want %d", tc.name, len(opts), err, tc.want)
		}
	}
}

func TestProtocol(t *testing.T) {
	for p, want := range map[string][2]bool{
		"PLAINTEXT": {false, false}, "SSL": {true, false}, "SASL_PLAINTEXT": {false, true}, "SASL_SSL": {true, true},
		"sasl_ssl": {true, true}, "": {false, false},
	} {
		if tlsOn, saslOn := Protocol(p); tlsOn != want[0] || saslOn != want[1] {
			t.Errorf("Protocol(%q) = %v, %v; want %v", p, tlsOn, saslOn, want)
		}
	}
}

func TestForProtocol(t *testing.T) {
	tl, s := TLS{ServerName: "b"}, SASL{Mechanism: "PLAIN", User: "u"}
	if c := ForProtocol("PLAINTEXT", tl, s); c.TLS != nil || c.SASL != nil {
		t.Errorf("PLAINTEXT: %+v", c)
	}
	if c := ForProtocol("sasl_ssl", tl, s); c.TLS == nil || c.TLS.ServerName != "b" || c.SASL == nil || c.SASL.User != "u" {
		t.Errorf("SASL_SSL: %+v", c)
	}
	if CheckHostname(true) != VerifyFull || CheckHostname(false) != VerifyChain {
		t.Error("CheckHostname")
	}
}
