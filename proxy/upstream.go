package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/clientopts"
)

// upstreamSet is the cluster a proxy leads to: its bootstrap list and kmirror's own TLS and
// SASL towards it. The destination's proxy keeps its own; a route's is its primary's until a
// switch makes it the standby's (SwitchRoute), read once per use so that a dial or discovery
// sees one whole set.
type upstreamSet struct {
	role      string // a route's upstreamPrimary or upstreamStandby; "" on the destination's proxy
	bootstrap []string
	tls       UpstreamTLS
	sasl      UpstreamSASL
}

// The roles of a route's upstream, as describe and the status page show them.
const (
	upstreamPrimary = "primary"
	upstreamStandby = "standby"
)

func (p *Proxy) upstream() *upstreamSet { return p.up.Load() }

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

// upstreamAuth is kmirror's own TLS and SASL towards the destination, for its raw
// connections (TLS only) and its clients (UpstreamClientOptions).
func (p *Proxy) upstreamAuth() clientopts.Config {
	var a clientopts.Config
	up := p.upstream()
	if u := up.tls; u.Enabled {
		a.TLS = &clientopts.TLS{
			CA:         clientopts.PEM{Name: "upstream_tls.ca_file", File: u.CAFile},
			Cert:       clientopts.PEM{Name: "upstream_tls.cert_file", File: u.CertFile},
			Key:        clientopts.PEM{Name: "upstream_tls.key_file", File: u.KeyFile},
			ServerName: u.ServerName,
		}
		if u.InsecureSkipVerify {
			a.TLS.Verify = clientopts.VerifyNone
		}
	}
	// Config.Validate refused unknown mechanisms already.
	if s := up.sasl; s.Mechanism != "" {
		a.SASL = &clientopts.SASL{Mechanism: s.Mechanism, User: s.Username, Pass: s.Password}
	}
	return a
}

// upstreamTLSConfig builds the client TLS config towards the brokers (nil: plaintext).
func (p *Proxy) upstreamTLSConfig() (*tls.Config, error) {
	if t := p.upstreamAuth().TLS; t != nil {
		return t.Config()
	}
	return nil, nil
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
	up := p.upstream()
	if err != nil && up.sasl.Mechanism == "" && errors.As(err, &eof) {
		// Without credentials kmirror's own clients (state, mirroring) cannot work at all and
		// would only retry quietly: say what to set.
		return fmt.Errorf("fetching broker metadata from %v: the destination closed the connection at the first request, "+
			"so it probably requires SASL: set upstream_sasl (mechanism, username, password) in the proxy config, "+
			"without it kmirror's state and mirroring cannot reach the destination: %w", up.bootstrap, err)
	}
	if err != nil {
		return fmt.Errorf("fetching broker metadata from %v: %w", up.bootstrap, err)
	}
	for _, b := range md.Brokers {
		p.advertise(b.NodeID, b.Host, b.Port)
	}
	if p.appRoute != nil {
		p.appRoute.pinClusterID(md.Cluster)
		if md.Cluster != "" {
			p.appRoute.upstreamClusterID.Store(&md.Cluster)
		}
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
