// Package clientopts turns TLS and SASL settings into franz-go client
// options, in one place for every Kafka client kmirror builds: the proxy's
// connections and clients towards the destination (proxy/upstream.go), the
// mirrors' source clients (coordinator/sourceclient) and the CLI's client
// (mirrorcli's --command-config). Callers translate their own config keys
// into a Config; the TLS and SASL set-up, and how certificates are checked,
// is decided here only.
package clientopts

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Config is how a client reaches its brokers.
type Config struct {
	TLS  *TLS  // nil: plaintext
	SASL *SASL // nil: no SASL
}

// Options are the client options for c (none for plaintext without SASL).
func (c Config) Options() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if c.TLS != nil {
		tc, err := c.TLS.Config()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if c.SASL != nil {
		m, err := c.SASL.Auth()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// ForProtocol keeps of t and s what Kafka's security.protocol (PLAINTEXT,
// SSL, SASL_PLAINTEXT or SASL_SSL, any case) asks for.
func ForProtocol(protocol string, t TLS, s SASL) Config {
	var c Config
	useTLS, useSASL := Protocol(protocol)
	if useTLS {
		c.TLS = &t
	}
	if useSASL {
		c.SASL = &s
	}
	return c
}

// Protocol says what Kafka's security.protocol asks for.
func Protocol(p string) (useTLS, useSASL bool) {
	p = strings.ToUpper(p)
	return strings.HasSuffix(p, "SSL"), strings.HasPrefix(p, "SASL")
}

// Verify is how much of the brokers' certificates a client checks.
type Verify int

const (
	// VerifyFull checks the chain and the host name (the default).
	VerifyFull Verify = iota
	// VerifyChain checks the chain but not the host name: Kafka's empty
	// ssl.endpoint.identification.algorithm.
	VerifyChain
	// VerifyNone checks nothing; only for tests (the proxy's
	// upstream_tls.insecure_skip_verify, documented as test-only).
	VerifyNone
)

// CheckHostname is VerifyFull, or VerifyChain when the host name is not
// checked (Kafka's ssl.endpoint.identification.algorithm empty).
func CheckHostname(on bool) Verify {
	if on {
		return VerifyFull
	}
	return VerifyChain
}

// PEM is PEM data given inline (Data) or by file (File), with the config key
// that set it, so that errors name what to fix.
type PEM struct {
	Name string // the config key, e.g. ssl.ca.location
	File string
	Data []byte
}

func (p PEM) empty() bool { return p.File == "" && p.Data == nil }

func (p PEM) read() ([]byte, error) {
	if p.Data != nil || p.File == "" {
		return p.Data, nil
	}
	b, err := os.ReadFile(p.File)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	return b, nil
}

// TLS is a client's TLS towards the brokers.
type TLS struct {
	CA         PEM    // CAs that sign the brokers' certificates; empty: the system's
	Cert, Key  PEM    // client certificate and key for mutual TLS; both or neither
	ServerName string // name expected in the brokers' certificates; empty: the host dialled
	Verify     Verify
}

// Config is the crypto/tls client config, TLS 1.2 at least.
func (t *TLS) Config() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if !t.CA.empty() {
		pool, err := t.roots()
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if !t.Cert.empty() || !t.Key.empty() {
		cert, err := t.clientCert()
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	switch t.Verify {
	case VerifyChain:
		tc.InsecureSkipVerify = true //nolint:gosec // the chain is verified by verifyChain
		tc.VerifyConnection = verifyChain(tc.RootCAs)
	case VerifyNone:
		tc.InsecureSkipVerify = true //nolint:gosec // operator's explicit choice, documented as test-only
	}
	return tc, nil
}

func (t *TLS) roots() (*x509.CertPool, error) {
	b, err := t.CA.read()
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		if t.CA.File != "" {
			return nil, fmt.Errorf("%s %s holds no PEM certificate", t.CA.Name, t.CA.File)
		}
		return nil, fmt.Errorf("%s holds no PEM certificate", t.CA.Name)
	}
	return pool, nil
}

func (t *TLS) clientCert() (tls.Certificate, error) {
	which := t.Cert.Name + "/" + t.Key.Name
	if t.Cert.empty() || t.Key.empty() {
		return tls.Certificate{}, fmt.Errorf("%s: the client certificate and key must be set together", which)
	}
	cert, err := t.Cert.read()
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := t.Key.read()
	if err != nil {
		return tls.Certificate{}, err
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", which, err)
	}
	return pair, nil
}

// verifyChain checks the brokers' chain against roots (nil: the system's)
// without their host name.
func verifyChain(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the server sent no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: time.Now()})
		return err
	}
}

// Mechanisms are the SASL mechanisms kmirror speaks.
var Mechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// SASL is a client's SASL login.
type SASL struct {
	Mechanism string // one of Mechanisms, any case
	User      string
	Pass      string
}

// String leaves the password out, so that a config printed in a log or an
// error does not leak it.
func (s SASL) String() string {
	return fmt.Sprintf("{mechanism:%s user:%s password:[redacted]}", s.Mechanism, s.User)
}

// Auth is the franz-go mechanism, or an error naming the ones supported.
func (s SASL) Auth() (sasl.Mechanism, error) {
	switch strings.ToUpper(s.Mechanism) {
	case "PLAIN":
		return plain.Auth{User: s.User, Pass: s.Pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: s.User, Pass: s.Pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: s.User, Pass: s.Pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("sasl.mechanism: %q is not supported (use one of %v)", s.Mechanism, Mechanisms)
}
