package sourceclient

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/internal/clientopts"
)

// TestAuth checks how a mirror's security configs map onto the client
// options: the protocol picks TLS and SASL, an empty
// ssl.endpoint.identification.algorithm skips only the host name check,
// and errors name the mirror config to fix.
func TestAuth(t *testing.T) {
	parse := func(kv ...string) mirrorconfig.Config {
		m := map[string]string{"bootstrap.servers": "src:9092"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return mirrorconfig.Parse(m)
	}
	if a := auth(parse()); a.TLS != nil || a.SASL != nil {
		t.Fatalf("plaintext: %+v", a)
	}
	a := auth(parse("security.protocol", "SASL_SSL", "sasl.mechanism", "SCRAM-SHA-512", "sasl.username", "u", "sasl.password", "p",
		"ssl.ca.location", "/ca.pem", "ssl.certificate.location", "/c.pem", "ssl.key.location", "/k.pem"))
	if a.SASL == nil || *a.SASL != (clientopts.SASL{Mechanism: "SCRAM-SHA-512", User: "u", Pass: "p"}) {
		t.Fatalf("SASL: %+v", a.SASL)
	}
	if a.TLS == nil || a.TLS.Verify != clientopts.VerifyFull || a.TLS.CA.File != "/ca.pem" || a.TLS.Cert.File != "/c.pem" || a.TLS.Key.File != "/k.pem" {
		t.Fatalf("TLS: %+v", a.TLS)
	}
	if a := auth(parse("security.protocol", "SSL", "ssl.endpoint.identification.algorithm", "")); a.TLS == nil || a.TLS.Verify != clientopts.VerifyChain || a.SASL != nil {
		t.Fatalf("SSL without host name check: %+v", a)
	}

	missing := filepath.Join(t.TempDir(), "ca.pem")
	if _, err := Options(parse("security.protocol", "SSL", "ssl.ca.location", missing)); err == nil || !strings.Contains(err.Error(), "ssl.ca.location: open "+missing) {
		t.Fatalf("missing CA: %v", err)
	}
	plain, err := Options(parse())
	if err != nil {
		t.Fatal(err)
	}
	opts, err := Options(parse("security.protocol", "SASL_PLAINTEXT", "sasl.username", "u", "sasl.password", "p"))
	if err != nil || len(opts) != len(plain)+1 {
		t.Fatalf("SASL_PLAINTEXT: %d options (plaintext: %d), %v", len(opts), len(plain), err)
	}
}
