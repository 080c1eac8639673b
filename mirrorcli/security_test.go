package mirrorcli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/clientopts"
)

func props(t *testing.T, text string) []Property {
	t.Helper()
	p, err := ParseProperties(text)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// selfSigned writes a PEM certificate and key and returns their paths.
func selfSigned(t *testing.T) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath = writeFile(t, "cert.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	keyPath = writeFile(t, "key.pem", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})))
	return certPath, keyPath
}

func TestParseSecurity(t *testing.T) {
	cert, key := selfSigned(t)
	notPEM := writeFile(t, "store.jks", "\xfe\xed\xfe\xed binary")
	for _, tc := range []struct {
		name, text string
		check      func(*securityConfig) bool
		err        string
	}{
		{"empty is plaintext", "", func(s *securityConfig) bool { return s.protocol == "PLAINTEXT" }, ""},
		{"jaas plain", "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" password=" + `"a\\\"b";` + "\n",
			func(s *securityConfig) bool { return s.user == "alice" && s.pass == `a"b` && s.mechanism == "PLAIN" }, ""},
		{"jaas scram", "security.protocol=sasl_ssl\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=bob password=\"pw\";\nssl.ca.location=" + cert,
			func(s *securityConfig) bool { return s.user == "bob" && s.pass == "pw" && s.tls.CA.Data != nil }, ""},
		{"username password", "security.protocol=SASL_PLAINTEXT\nsasl.username=u\nsasl.password=p\n", func(s *securityConfig) bool { return s.user == "u" && s.pass == "p" }, ""},
		{"mtls", "security.protocol=SSL\nssl.truststore.location=" + cert + "\nssl.truststore.type=PEM\nssl.certificate.location=" + cert + "\nssl.key.location=" + key + "\nssl.endpoint.identification.algorithm=\n",
			func(s *securityConfig) bool { return s.tls.Cert.Data != nil && s.tls.Verify == clientopts.VerifyChain }, ""},

		{"unknown key", "bootstrap.servers=x\n", nil, `line 1: unknown key "bootstrap.servers"; accepted keys are: client.id, sasl.jaas.config`},
		{"jks", "security.protocol=SSL\nssl.truststore.location=" + notPEM + "\nssl.truststore.type=JKS\n", nil, "ssl.truststore.type=JKS is not supported: export the CA certificates as PEM"},
		{"not pem", "security.protocol=SSL\nssl.truststore.location=" + notPEM + "\n", nil, "is not a PEM file"},
		{"key password", "ssl.key.password=x\n", nil, "ssl.key.password is not supported: kmirror reads unencrypted PEM only"},
		{"gssapi", "security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n", nil, "sasl.mechanism=GSSAPI is not supported"},
		{"no creds", "security.protocol=SASL_SSL\n", nil, "needs credentials"},
		{"creds without sasl", "sasl.username=u\nsasl.password=p\n", nil, "SASL credentials are set but security.protocol is PLAINTEXT"},
		{"ssl without tls", "ssl.ca.location=" + cert + "\n", nil, "ssl.ca.location is set but security.protocol is PLAINTEXT"},
		{"jaas and username", "security.protocol=SASL_SSL\nsasl.username=u\nsasl.jaas.config=x required username=\"a\" password=\"b\";\n", nil, "keep one"},
		{"jaas module", "security.protocol=SASL_SSL\nsasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;\n", nil, "supports PlainLoginModule and ScramLoginModule"},
		{"jaas mechanism mismatch", "security.protocol=SASL_SSL\nsasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"a\" password=\"b\";\n", nil, "set sasl.mechanism=SCRAM-SHA-256 or SCRAM-SHA-512"},
		{"jaas no password", "security.protocol=SASL_SSL\nsasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\";\n", nil, `needs username="..." and password="..."`},
		{"cert without key", "security.protocol=SSL\nssl.certificate.location=" + cert + "\n", nil, "must be set together"},
		{"bad protocol", "security.protocol=TLS\n", nil, "want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"},
		{"two CA sources", "security.protocol=SSL\nssl.ca.location=" + cert + "\nssl.truststore.location=" + cert + "\n", nil, "keep one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := parseSecurity(props(t, tc.text))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(sc) {
				t.Fatalf("unexpected config %+v", sc)
			}
			if _, err := sc.options(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestReadMirrorConfigTranslatesJAAS(t *testing.T) {
	p := writeFile(t, "m.properties", "bootstrap.servers=src:9092\nsecurity.protocol=SASL_SSL\n"+
		"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n  username=\"alice\" \\\n  password=\"pw\";\n")
	got, err := readMirrorConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	var flat []string
	for _, c := range got {
		flat = append(flat, c.Name+"="+*c.Value)
	}
	if strings.Join(flat, " ") != "bootstrap.servers=src:9092 security.protocol=SASL_SSL sasl.username=alice sasl.password=pw" {
		t.Fatalf("got %q", flat)
	}
	// A config provider reference as the JAAS password is sent as written.
	ref := "${file:/etc/kmirror/source.properties:sasl.password}"
	got, err = readMirrorConfig(writeFile(t, "r.properties", "bootstrap.servers=src:9092\n"+
		"sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\""+ref+"\";\n"))
	if err != nil || len(got) != 3 || got[2].Name != "sasl.password" || *got[2].Value != ref {
		t.Fatalf("reference in JAAS: %v %+v", err, got)
	}
	if _, err := readMirrorConfig(writeFile(t, "e.properties", "# nothing\n")); err == nil || !strings.Contains(err.Error(), "needs at least bootstrap.servers") {
		t.Fatalf("empty mirror config: %v", err)
	}
}
