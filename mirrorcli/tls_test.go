package mirrorcli

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/tlstest"
)

// TestDumpStateCommandConfigTLS checks the TLS keys of --command-config
// against a mutual-TLS kfake whose certificate names another host: chain
// verification always, host name verification unless
// ssl.endpoint.identification.algorithm is empty, and a client keystore.
func TestDumpStateCommandConfigTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "kmirror test CA")
	srvCert, srvKey := ca.Issue(t, "broker", []string{"kafka.example"}, nil, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.Issue(t, "ops", nil, nil, x509.ExtKeyUsageClientAuth)
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := strings.Join(c.ListenAddrs(), ",")

	caFile := writeFile(t, "ca.pem", string(ca.PEM))
	otherCA := writeFile(t, "other.pem", string(tlstest.NewCA(t, "someone else").PEM))
	keystore := writeFile(t, "client.pem", string(cliCert)+string(cliKey))

	// Seed a state record over TLS.
	cliPair, _ := tls.X509KeyPair(cliCert, cliKey)
	seedState(t, c.ListenAddrs(), 1,
		kgo.DialTLSConfig(&tls.Config{RootCAs: ca.Pool(), ServerName: "kafka.example", Certificates: []tls.Certificate{cliPair}}))

	base := "security.protocol=SSL\nssl.keystore.location=" + keystore + "\nssl.keystore.type=PEM\n"
	for _, tc := range []struct {
		name, conf string
		ok         bool
		why        string // in the error of a failing case
	}{
		{"chain ok, host name skipped", base + "ssl.truststore.location=" + caFile + "\nssl.endpoint.identification.algorithm=\n", true, ""},
		{"host name checked", base + "ssl.truststore.location=" + caFile + "\n", false, "cannot validate certificate for 127.0.0.1"},
		{"wrong CA even without host check", base + "ssl.ca.location=" + otherCA + "\nssl.endpoint.identification.algorithm=\n", false, "certificate signed by unknown authority"},
		{"no client certificate", "security.protocol=SSL\nssl.ca.location=" + caFile + "\nssl.endpoint.identification.algorithm=\n", false, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runDumpState(t, "--bootstrap-server", addr, "--command-config", writeFile(t, "c.properties", tc.conf), "--timeout", "5s")
			if tc.ok {
				mustRun(t, 0, r)
				mustContain(t, "TLS dump", r.stdout, `MirrorConfig mirror="dr"`)
				return
			}
			mustRun(t, 1, r)
			mustContain(t, "TLS failure", r.stderr, tc.why)
		})
	}
}
