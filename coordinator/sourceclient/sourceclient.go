// Package sourceclient builds franz-go clients for a mirror's source cluster
// from its mirror configs, and caches one per mirror so that admin RPCs,
// topic discovery and the copy pipeline of an instance share connections.
package sourceclient

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/secrets"
	"github.com/kmirror/kmirror/internal/clientid"
	"github.com/kmirror/kmirror/internal/clientopts"
)

// Options turns mirror configs into client options.
func Options(c mirrorconfig.Config) ([]kgo.Opt, error) {
	if len(c.Bootstrap) == 0 {
		return nil, fmt.Errorf("bootstrap.servers is empty")
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Bootstrap...),
		kgo.ClientID(clientid.Admin), // a mirror's own clients say clientid.Source (Cache.Options)
		kgo.DialTimeout(10 * time.Second),
		kgo.MetadataMinAge(time.Second),
	}
	auth, err := auth(c).Options()
	if err != nil {
		return nil, err
	}
	return append(opts, auth...), nil
}

// auth is how a mirror's source client reaches the source: TLS and SASL
// from security.protocol and the ssl.* and sasl.* configs.
func auth(c mirrorconfig.Config) clientopts.Config {
	return clientopts.ForProtocol(c.SecurityProtocol, clientopts.TLS{
		CA:     clientopts.PEM{Name: "ssl.ca.location", File: c.CAFile},
		Cert:   clientopts.PEM{Name: "ssl.certificate.location", File: c.CertFile},
		Key:    clientopts.PEM{Name: "ssl.key.location", File: c.KeyFile},
		Verify: clientopts.CheckHostname(c.VerifyHostname),
	}, clientopts.SASL{Mechanism: c.SASLMechanism, User: c.SASLUser, Pass: c.SASLPass})
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
// It turns the stored configs into the client's with the instance's
// secrets resolver (references resolved, encrypted values decrypted), so
// each instance reads its own files, environment and keys.
type Cache struct {
	extra    []kgo.Opt
	secrets  *secrets.Resolver
	log      *slog.Logger
	mu       sync.Mutex
	m        map[string]cached
	repMu    sync.Mutex        // Options runs under mu (Client) and without it
	reported map[string]string // mirror → the secret error last logged, so a retry loop logs it once
	throttle *Throttles
}

type cached struct {
	fingerprint string
	cl          *kgo.Client
}

// NewCache returns a cache whose clients also get extra options. It has no
// secrets key until WithSecrets.
func NewCache(extra ...kgo.Opt) *Cache {
	return &Cache{extra: extra, m: map[string]cached{}, reported: map[string]string{}, log: slog.New(slog.DiscardHandler), throttle: newThrottles()}
}

// WithSecrets sets how stored secrets are resolved and where their errors
// are logged.
func (c *Cache) WithSecrets(r *secrets.Resolver, log *slog.Logger) *Cache {
	c.secrets, c.log = r, log
	return c
}

// Secrets is the cache's secrets resolver (nil: no keys; references still
// resolve).
func (c *Cache) Secrets() *secrets.Resolver { return c.secrets }

// Throttles is how long the source brokers throttled each mirror's client.
func (c *Cache) Throttles() *Throttles { return c.throttle }

// Options resolves a mirror's stored configs on this instance and turns them
// into client options, with the mirror's client id (clientid.Source). A
// secret that does not resolve here is logged at
// ERROR (naming the mirror and the reference or key id, never a value) and
// returned as a *secrets.Error; it is retried by whoever asks again, so the
// mirror recovers by itself once the file, variable or key is there.
func (c *Cache) Options(mirror string, configs map[string]string) ([]kgo.Opt, error) {
	resolved, err := c.secrets.Resolve(mirror, configs)
	c.repMu.Lock()
	last := c.reported[mirror]
	switch {
	case err != nil:
		c.reported[mirror] = err.Error()
	default:
		delete(c.reported, mirror)
	}
	c.repMu.Unlock()
	if err != nil {
		if last != err.Error() {
			c.log.Error("a source secret of the mirror does not resolve on this instance; the mirror's partitions do not copy here until it does",
				"mirror", mirror, "err", err)
		}
		return nil, err
	}
	if last != "" {
		c.log.Info("the mirror's source secrets resolve again on this instance", "mirror", mirror)
	}
	if clear := secrets.InClear(configs); len(clear) > 0 {
		c.log.Warn("the mirror's source secret is stored in clear in the state topic (written by an older kmirror); `kmirror mirrors --alter` on an instance with a secrets key re-saves it encrypted",
			"mirror", mirror, "configs", clear)
	}
	cfg := mirrorconfig.Parse(resolved)
	opts, err := Options(cfg)
	if err != nil {
		return nil, err
	}
	return append(opts, kgo.ClientID(clientid.Source(mirror, cfg.SourceClientID))), nil
}

// Client returns the mirror's source client. Secrets are resolved when the
// client is built: a changed file takes effect with the next client (the
// instance's restart), as with Kafka's own clients.
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
	opts, err := c.Options(mirror, configs)
	if err != nil {
		return nil, fmt.Errorf("source client for mirror %s: %w", mirror, err)
	}
	cl, err := kgo.NewClient(append(append(opts, kgo.WithHooks(c.throttle.hook(mirror))), c.extra...)...)
	if err != nil {
		return nil, fmt.Errorf("source client for mirror %s: %w", mirror, err)
	}
	id, _ := cl.OptValue(kgo.ClientID).(string)
	c.throttle.named(mirror, id)
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
	c.throttle.drop(mirror)
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
