package proxy

import (
	"strings"
	"testing"
)

func TestClientAuthConfig(t *testing.T) {
	base := func() Config { return Config{Upstream: []string{"b:9092"}} }
	for _, c := range []struct {
		name   string
		mutate func(*Config)
		mode   string
		err    string
	}{
		{"plain destination", func(*Config) {}, ClientAuthNone, ""},
		{"SASL destination", func(c *Config) { c.UpstreamSASL = UpstreamSASL{Mechanism: "PLAIN", Username: "k", Password: "p"} }, ClientAuthSASL, ""},
		{"client certificates", func(c *Config) { c.TLS = ListenerTLS{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"} }, ClientAuthMTLS, ""},
		{"explicit none", func(c *Config) { c.ClientAuth = "NONE"; c.UpstreamSASL.Mechanism = "PLAIN" }, ClientAuthNone, ""},
		{"mtls without a client CA", func(c *Config) { c.ClientAuth = "mtls" }, "", "client_auth mtls needs tls.client_ca_file"},
		{"unknown mode", func(c *Config) { c.ClientAuth = "kerberos" }, "", `client_auth "kerberos": want sasl, mtls or none`},
		{"policy outside mtls", func(c *Config) { c.MTLSPolicy = []MTLSGrant{{Principal: "User:CN=a"}} }, "", "mtls_policy is set but client_auth is \"none\""},
		{"policy principal", func(c *Config) {
			c.TLS = ListenerTLS{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}
			c.MTLSPolicy = []MTLSGrant{{Principal: "CN=a"}}
		}, "", "want User:<certificate subject>"},
		{"policy operation", func(c *Config) {
			c.TLS = ListenerTLS{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}
			c.MTLSPolicy = []MTLSGrant{{Principal: "User:CN=a", Operations: []string{"write"}}}
		}, "", `operation "write" for User:CN=a: want alter, describe or create`},
	} {
		cfg := base()
		c.mutate(&cfg)
		cfg = cfg.withDefaults()
		err := cfg.Validate()
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "" && cfg.ClientAuth != c.mode:
			t.Errorf("%s: client_auth %q, want %q", c.name, cfg.ClientAuth, c.mode)
		}
		if cfg.AuditLog != "stderr" {
			t.Errorf("%s: audit_log defaults to %q", c.name, cfg.AuditLog)
		}
	}
}
