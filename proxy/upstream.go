package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/kmirror/kmirror/internal/kafkaauth"
)

// dialUpstream connects to the broker behind route r (TLS when configured). SASL is not
// done here: the client authenticates through the 1:1 connection itself.
func (p *Proxy) dialUpstream(ctx context.Context, r route) (net.Conn, error) {
	addrs := p.upstreamAddrs(r)
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no known address for broker %d", r.node)
	}
	tlsCfg, err := p.upstreamTLSConfig()
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, addr := range addrs {
		dctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
		conn, err := p.dialOne(dctx, addr, tlsCfg)
		cancel()
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func (p *Proxy) dialOne(ctx context.Context, addr string, tlsCfg *tls.Config) (net.Conn, error) {
	d := net.Dialer{KeepAlive: 30 * time.Second}
	if tlsCfg != nil {
		td := tls.Dialer{NetDialer: &d, Config: tlsCfg}
		return td.DialContext(ctx, "tcp", addr)
	}
	return d.DialContext(ctx, "tcp", addr)
}

// upstreamTLSConfig builds the client TLS config towards the brokers (nil: plaintext).
func (p *Proxy) upstreamTLSConfig() (*tls.Config, error) {
	u := p.cfg.UpstreamTLS
	if !u.Enabled {
		return nil, nil
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         u.ServerName,
		InsecureSkipVerify: u.InsecureSkipVerify, //nolint:gosec // operator's explicit choice, documented as test-only
	}
	if u.CAFile != "" {
		pem, err := os.ReadFile(u.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading upstream_tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("upstream_tls.ca_file %s holds no PEM certificate", u.CAFile)
		}
		cfg.RootCAs = pool
	}
	if u.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(u.CertFile, u.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading upstream_tls client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// upstreamSASL returns kmirror's own SASL mechanism towards the destination (nil: none).
func (p *Proxy) upstreamSASL() sasl.Mechanism {
	s := p.cfg.UpstreamSASL
	if s.Mechanism == "" {
		return nil
	}
	// Config.Validate refused unknown mechanisms already.
	m, _ := kafkaauth.SASL(strings.ToUpper(s.Mechanism), s.Username, s.Password)
	return m
}

// discover asks upstream for its brokers and makes sure each has a listener.
func (p *Proxy) discover(ctx context.Context) error {
	// The same options as every other client kmirror builds: its own TLS and SASL.
	opts, err := p.UpstreamClientOptions()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(1))...)
	if err != nil {
		return fmt.Errorf("creating discovery client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	adm := kadm.NewClient(cl)
	md, err := adm.BrokerMetadata(ctx)
	var eof *kgo.ErrFirstReadEOF
	if err != nil && p.cfg.UpstreamSASL.Mechanism == "" && errors.As(err, &eof) {
		// Without credentials kmirror's own clients (state, mirroring) cannot work at all and
		// would only retry quietly: say what to set.
		return fmt.Errorf("fetching broker metadata from %v: the destination closed the connection at the first request, "+
			"so it probably requires SASL: set upstream_sasl (mechanism, username, password) in the proxy config, "+
			"without it kmirror's state and mirroring cannot reach the destination: %w", p.cfg.Upstream, err)
	}
	if err != nil {
		return fmt.Errorf("fetching broker metadata from %v: %w", p.cfg.Upstream, err)
	}
	for _, b := range md.Brokers {
		p.advertise(b.NodeID, b.Host, b.Port)
	}
	if err := p.checkUpstreamKeys(ctx, adm); err != nil {
		p.log.Warn("could not check the destination's API keys against kmirror's range; clients' ApiVersions answers are still checked", "err", err)
	}
	return nil
}

// runDiscovery refreshes the broker list periodically so a broker that joins gets its
// listener even before a client asks for metadata.
func (p *Proxy) runDiscovery() {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.MetadataRefresh)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
			if err := p.discover(p.ctx); err != nil && p.ctx.Err() == nil {
				p.log.Debug("broker discovery failed", "err", err)
			}
		}
	}
}
