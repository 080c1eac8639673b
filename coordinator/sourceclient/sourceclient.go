// Package sourceclient builds franz-go clients for a mirror's source cluster
// from its mirror configs, and caches one per mirror so that admin RPCs,
// topic discovery and the copy pipeline of an instance share connections.
package sourceclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/internal/kafkaauth"
)

// Options turns mirror configs into client options.
func Options(c mirrorconfig.Config) ([]kgo.Opt, error) {
	if len(c.Bootstrap) == 0 {
		return nil, fmt.Errorf("bootstrap.servers is empty")
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Bootstrap...),
		kgo.ClientID("kmirror"),
		kgo.DialTimeout(10 * time.Second),
		kgo.MetadataMinAge(time.Second),
	}
	if strings.HasSuffix(c.SecurityProtocol, "SSL") {
		tc, err := tlsConfig(c)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if strings.HasPrefix(c.SecurityProtocol, "SASL") {
		m, err := kafkaauth.SASL(c.SASLMechanism, c.SASLUser, c.SASLPass)
		if err != nil {
			return nil, fmt.Errorf("sasl.mechanism: %w", err)
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

func tlsConfig(c mirrorconfig.Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: !c.VerifyHostname} //nolint:gosec // operator's explicit choice
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ssl.ca.location: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ssl.ca.location %s holds no PEM certificate", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("ssl.certificate.location/ssl.key.location: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// ClusterID asks a cluster for its id.
func ClusterID(ctx context.Context, cl *kgo.Client) (string, error) {
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return "", err
	}
	if resp.ClusterID == nil {
		return "", fmt.Errorf("the cluster reports no cluster id")
	}
	return *resp.ClusterID, nil
}

// Cache keeps one source client per mirror, rebuilt when its configs change.
type Cache struct {
	extra []kgo.Opt
	mu    sync.Mutex
	m     map[string]cached
}

type cached struct {
	fingerprint string
	cl          *kgo.Client
}

// NewCache returns a cache whose clients also get extra options.
func NewCache(extra ...kgo.Opt) *Cache { return &Cache{extra: extra, m: map[string]cached{}} }

// Client returns the mirror's source client.
func (c *Cache) Client(mirror string, configs map[string]string) (*kgo.Client, error) {
	fp := fingerprint(configs)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[mirror]; ok {
		if e.fingerprint == fp {
			return e.cl, nil
		}
		e.cl.Close()
		delete(c.m, mirror)
	}
	opts, err := Options(mirrorconfig.Parse(configs))
	if err != nil {
		return nil, fmt.Errorf("source client for mirror %s: %w", mirror, err)
	}
	cl, err := kgo.NewClient(append(opts, c.extra...)...)
	if err != nil {
		return nil, fmt.Errorf("source client for mirror %s: %w", mirror, err)
	}
	c.m[mirror] = cached{fp, cl}
	return cl, nil
}

// Drop closes and forgets a mirror's client (mirror deleted).
func (c *Cache) Drop(mirror string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[mirror]; ok {
		e.cl.Close()
		delete(c.m, mirror)
	}
}

// Close closes every client.
func (c *Cache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		e.cl.Close()
		delete(c.m, k)
	}
}

// fingerprint covers the configs a client is built from: changing another
// config (a rate limit, a pattern) must not close the client under the
// copies that use it.
func fingerprint(configs map[string]string) string {
	keys := make([]string, 0, len(configs))
	for k := range configs {
		if mirrorconfig.IsConnection(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(configs[k])
		b.WriteByte(0)
	}
	return b.String()
}
