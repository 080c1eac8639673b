package mirrorcli

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/clientopts"
)

// commandConfigKeys are the --command-config keys kmirror understands, with
// what each does. They follow Kafka's client configs; the librdkafka-style
// sasl.username/sasl.password and ssl.*.location keys are accepted too.
var commandConfigKeys = map[string]string{
	"security.protocol":                     "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
	"sasl.mechanism":                        "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
	"sasl.jaas.config":                      `PlainLoginModule or ScramLoginModule required username="..." password="...";`,
	"sasl.username":                         "SASL user (instead of sasl.jaas.config)",
	"sasl.password":                         "SASL password (instead of sasl.jaas.config)",
	"ssl.ca.location":                       "PEM file of CA certificates",
	"ssl.truststore.location":               "PEM file of CA certificates (JKS/PKCS12 are not supported)",
	"ssl.truststore.type":                   "PEM (the only supported type)",
	"ssl.truststore.certificates":           "CA certificates inline, PEM",
	"ssl.certificate.location":              "PEM client certificate (mutual TLS)",
	"ssl.key.location":                      "PEM client key, unencrypted (mutual TLS)",
	"ssl.keystore.location":                 "PEM file holding the client certificate chain and key",
	"ssl.keystore.type":                     "PEM (the only supported type)",
	"ssl.keystore.certificate.chain":        "client certificate chain inline, PEM",
	"ssl.keystore.key":                      "client key inline, PEM, unencrypted",
	"ssl.endpoint.identification.algorithm": "https (default) verifies the host name; empty skips that check",
	"client.id":                             "client id sent to the proxy",
}

// passwordKeys are refused with a fix: kmirror reads only unencrypted PEM.
var passwordKeys = map[string]bool{
	"ssl.key.password": true, "ssl.keystore.password": true, "ssl.truststore.password": true,
}

// securityConfig is a parsed --command-config.
type securityConfig struct {
	protocol   string
	mechanism  string
	user, pass string
	tls        clientopts.TLS // PEM read and checked, named by the key that gave it
	clientID   string
}

// loadCommandConfig reads a --command-config file ("" = none) into client
// options.
func loadCommandConfig(path string) ([]kgo.Opt, error) {
	if path == "" {
		return nil, nil
	}
	props, err := ReadProperties(path)
	if err != nil {
		return nil, fmt.Errorf("--command-config: %w", err)
	}
	sc, err := parseSecurity(props)
	if err != nil {
		return nil, fmt.Errorf("--command-config %s: %w", path, err)
	}
	return sc.options()
}

func acceptedCommandConfigKeys() string {
	return strings.Join(slices.Sorted(maps.Keys(commandConfigKeys)), ", ")
}

func parseSecurity(props []Property) (*securityConfig, error) {
	m := map[string]string{}
	for _, p := range props {
		if passwordKeys[p.Key] {
			return nil, fmt.Errorf("line %d: %s is not supported: kmirror reads unencrypted PEM only; decrypt the key (openssl pkcs8 -in key.pem -out plain.pem) or convert the store to PEM, and remove %s", p.Line, p.Key, p.Key)
		}
		if _, ok := commandConfigKeys[p.Key]; !ok {
			return nil, fmt.Errorf("line %d: unknown key %q; accepted keys are: %s", p.Line, p.Key, acceptedCommandConfigKeys())
		}
		m[p.Key] = p.Value
	}
	sc := &securityConfig{protocol: "PLAINTEXT", mechanism: "PLAIN", clientID: m["client.id"]}
	if v, ok := m["security.protocol"]; ok {
		sc.protocol = strings.ToUpper(v)
		switch sc.protocol {
		case "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL":
		default:
			return nil, fmt.Errorf("security.protocol=%s: want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", v)
		}
	}
	if v, ok := m["sasl.mechanism"]; ok {
		sc.mechanism = strings.ToUpper(v)
		switch sc.mechanism {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			return nil, fmt.Errorf("sasl.mechanism=%s is not supported: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", v)
		}
	}
	sc.user, sc.pass = m["sasl.username"], m["sasl.password"]
	if jaas, ok := m["sasl.jaas.config"]; ok {
		if sc.user != "" || sc.pass != "" {
			return nil, errors.New("both sasl.jaas.config and sasl.username/sasl.password are set; keep one")
		}
		j, err := parseJAAS(jaas)
		if err != nil {
			return nil, err
		}
		if j.scram && !strings.HasPrefix(sc.mechanism, "SCRAM") {
			return nil, fmt.Errorf("sasl.jaas.config uses ScramLoginModule but sasl.mechanism is %s; set sasl.mechanism=SCRAM-SHA-256 or SCRAM-SHA-512", sc.mechanism)
		}
		if !j.scram && sc.mechanism != "PLAIN" {
			return nil, fmt.Errorf("sasl.jaas.config uses PlainLoginModule but sasl.mechanism is %s; set sasl.mechanism=PLAIN", sc.mechanism)
		}
		sc.user, sc.pass = j.user, j.pass
	}
	_, sasl := clientopts.Protocol(sc.protocol)
	if sasl && sc.user == "" {
		return nil, fmt.Errorf("security.protocol=%s needs credentials: set sasl.jaas.config, or sasl.username and sasl.password", sc.protocol)
	}
	if !sasl && (sc.user != "" || m["sasl.jaas.config"] != "") {
		return nil, fmt.Errorf("SASL credentials are set but security.protocol is %s; set security.protocol=SASL_PLAINTEXT or SASL_SSL", sc.protocol)
	}

	if err := sc.parseTLS(m); err != nil {
		return nil, err
	}
	return sc, nil
}

// parseTLS reads the ssl.* keys.
func (sc *securityConfig) parseTLS(m map[string]string) error {
	var err error
	if sc.tls.CA, err = caPEM(m); err != nil {
		return err
	}
	if sc.tls.Cert, sc.tls.Key, err = clientCertPEM(m); err != nil {
		return err
	}
	if v, ok := m["ssl.endpoint.identification.algorithm"]; ok {
		switch strings.ToLower(v) {
		case "https":
		case "":
			sc.tls.Verify = clientopts.VerifyChain
		default:
			return fmt.Errorf("ssl.endpoint.identification.algorithm=%s: want https or empty", v)
		}
	}
	if tlsOn, _ := clientopts.Protocol(sc.protocol); !tlsOn {
		for k := range m {
			if strings.HasPrefix(k, "ssl.") {
				return fmt.Errorf("%s is set but security.protocol is %s, which does not use TLS; set security.protocol=SSL or SASL_SSL, or remove %s", k, sc.protocol, k)
			}
		}
	}
	return nil
}

func caPEM(m map[string]string) (clientopts.PEM, error) {
	var sources []string
	var out []byte
	if p := m["ssl.ca.location"]; p != "" {
		sources = append(sources, "ssl.ca.location")
		b, err := readPEMFile("ssl.ca.location", p)
		if err != nil {
			return clientopts.PEM{}, err
		}
		out = b
	}
	if p := m["ssl.truststore.location"]; p != "" {
		sources = append(sources, "ssl.truststore.location")
		if t := m["ssl.truststore.type"]; t != "" && !strings.EqualFold(t, "PEM") {
			return clientopts.PEM{}, fmt.Errorf("ssl.truststore.type=%s is not supported: export the CA certificates as PEM (keytool -exportcert -rfc -keystore %s -alias ALIAS) and set ssl.truststore.type=PEM", t, p)
		}
		b, err := readPEMFile("ssl.truststore.location", p)
		if err != nil {
			return clientopts.PEM{}, err
		}
		out = b
	}
	if c := m["ssl.truststore.certificates"]; c != "" {
		sources = append(sources, "ssl.truststore.certificates")
		out = []byte(c)
	}
	if len(sources) > 1 {
		return clientopts.PEM{}, fmt.Errorf("CA certificates are given by %s; keep one", strings.Join(sources, " and "))
	}
	if out == nil {
		return clientopts.PEM{}, nil
	}
	if !x509.NewCertPool().AppendCertsFromPEM(out) {
		return clientopts.PEM{}, fmt.Errorf("%s holds no PEM certificate", sources[0])
	}
	return clientopts.PEM{Name: sources[0], Data: out}, nil
}

func clientCertPEM(m map[string]string) (certPEM, keyPEM clientopts.PEM, err error) {
	var cert, key []byte
	var names [2]string // the keys that gave the certificate and the key
	switch {
	case m["ssl.certificate.location"] != "" || m["ssl.key.location"] != "":
		if m["ssl.certificate.location"] == "" || m["ssl.key.location"] == "" {
			return certPEM, keyPEM, errors.New("ssl.certificate.location and ssl.key.location must be set together")
		}
		names = [2]string{"ssl.certificate.location", "ssl.key.location"}
		if cert, err = readPEMFile("ssl.certificate.location", m["ssl.certificate.location"]); err != nil {
			return certPEM, keyPEM, err
		}
		if key, err = readPEMFile("ssl.key.location", m["ssl.key.location"]); err != nil {
			return certPEM, keyPEM, err
		}
	case m["ssl.keystore.location"] != "":
		if t := m["ssl.keystore.type"]; t != "" && !strings.EqualFold(t, "PEM") {
			return certPEM, keyPEM, fmt.Errorf("ssl.keystore.type=%s is not supported: convert the keystore to one PEM file with the certificate chain and an unencrypted key, and set ssl.keystore.type=PEM", t)
		}
		b, err := readPEMFile("ssl.keystore.location", m["ssl.keystore.location"])
		if err != nil {
			return certPEM, keyPEM, err
		}
		cert, key = b, b // tls.X509KeyPair picks the blocks it needs
		names = [2]string{"ssl.keystore.location", "ssl.keystore.location"}
	case m["ssl.keystore.certificate.chain"] != "" || m["ssl.keystore.key"] != "":
		if m["ssl.keystore.certificate.chain"] == "" || m["ssl.keystore.key"] == "" {
			return certPEM, keyPEM, errors.New("ssl.keystore.certificate.chain and ssl.keystore.key must be set together")
		}
		cert, key = []byte(m["ssl.keystore.certificate.chain"]), []byte(m["ssl.keystore.key"])
		names = [2]string{"ssl.keystore.certificate.chain", "ssl.keystore.key"}
	default:
		return certPEM, keyPEM, nil // none
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		return certPEM, keyPEM, fmt.Errorf("client certificate and key do not load: %w (kmirror needs an unencrypted PEM key)", err)
	}
	return clientopts.PEM{Name: names[0], Data: cert}, clientopts.PEM{Name: names[1], Data: key}, nil
}

func readPEMFile(key, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if blk, _ := pem.Decode(b); blk == nil {
		return nil, fmt.Errorf("%s=%s is not a PEM file; kmirror reads PEM only (convert JKS/PKCS12 with keytool or openssl)", key, path)
	}
	return b, nil
}

// options turns the config into kgo options.
func (sc *securityConfig) options() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if sc.clientID != "" {
		opts = append(opts, kgo.ClientID(sc.clientID))
	}
	auth, err := sc.auth().Options()
	if err != nil {
		return nil, err
	}
	return append(opts, auth...), nil
}

// auth is the TLS and SASL part.
func (sc *securityConfig) auth() clientopts.Config {
	return clientopts.ForProtocol(sc.protocol, sc.tls, clientopts.SASL{Mechanism: sc.mechanism, User: sc.user, Pass: sc.pass})
}

// jaasLogin is what kmirror takes from a sasl.jaas.config value.
type jaasLogin struct {
	scram      bool
	user, pass string
}

var jaasRE = regexp.MustCompile(`^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?)\s*;?\s*$`)
var jaasOptionRE = regexp.MustCompile(`^\s*([\w.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))`)

// parseJAAS reads `org.apache.kafka.common.security.plain.PlainLoginModule
// required username="u" password="p";` (or ScramLoginModule).
func parseJAAS(v string) (jaasLogin, error) {
	var j jaasLogin
	m := jaasRE.FindStringSubmatch(v)
	if m == nil {
		return j, fmt.Errorf(`sasl.jaas.config is not LoginModule required username="..." password="...";`)
	}
	switch {
	case strings.HasSuffix(m[1], "PlainLoginModule"):
	case strings.HasSuffix(m[1], "ScramLoginModule"):
		j.scram = true
	default:
		return j, fmt.Errorf("sasl.jaas.config uses %s; kmirror supports PlainLoginModule and ScramLoginModule", m[1])
	}
	rest := m[3]
	for strings.TrimSpace(rest) != "" {
		om := jaasOptionRE.FindStringSubmatchIndex(rest)
		if om == nil {
			return j, fmt.Errorf("sasl.jaas.config: cannot read option at %q; write options as name=\"value\"", strings.TrimSpace(rest))
		}
		name := rest[om[2]:om[3]]
		var val string
		if om[4] >= 0 {
			val = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(rest[om[4]:om[5]])
		} else {
			val = rest[om[6]:om[7]]
		}
		switch name {
		case "username":
			j.user = val
		case "password":
			j.pass = val
		}
		rest = rest[om[1]:]
	}
	if j.user == "" || j.pass == "" {
		return j, errors.New(`sasl.jaas.config needs username="..." and password="..."`)
	}
	return j, nil
}
