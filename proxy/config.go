package proxy

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
)

// Config is the proxy configuration. Zero values mean "use the default" (see Defaults);
// docs/proxy.md documents every key with its YAML name and flag.
type Config struct {
	// Upstream is the destination cluster's bootstrap list (host:port).
	Upstream []string `yaml:"upstream"`
	// Listen is the bootstrap listener address clients are configured with.
	Listen string `yaml:"listen"`
	// AdvertisedHost is the host name returned to clients for every broker listener; behind
	// a TCP load balancer this is the load balancer's name. Default: Listen's host, or
	// "localhost" when Listen binds every interface.
	AdvertisedHost string `yaml:"advertised_host"`
	// BrokerListenHost is the interface broker listeners bind (default: Listen's host).
	BrokerListenHost string `yaml:"broker_listen_host"`
	// BrokerPortBase and BrokerPortCount define the port rule: broker node id N listens on
	// BrokerPortBase+N for 0 <= N < BrokerPortCount, unless BrokerPorts names a port for N.
	// The rule uses nothing but the node id, so every instance behind a load balancer maps
	// a broker to the same port, and a broker that joins later never shifts the others.
	// BrokerPortBase 0 means ephemeral ports (a single instance, tests).
	BrokerPortBase  int           `yaml:"broker_port_base"`
	BrokerPortCount int           `yaml:"broker_port_count"`
	BrokerPorts     map[int32]int `yaml:"broker_ports"`
	// MaxFrameBytes bounds one request or response (Kafka's socket.request.max.bytes).
	MaxFrameBytes int32 `yaml:"max_frame_bytes"`
	// MaxInFlight bounds the requests of one client connection that await their response.
	MaxInFlight int `yaml:"max_in_flight"`
	// IdleTimeout closes connections without traffic (Kafka's connections.max.idle.ms).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// DialTimeout bounds connecting to an upstream broker.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// ShutdownTimeout bounds draining in-flight requests on shutdown.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// MetadataRefresh is how often the proxy asks upstream for its brokers so that a broker
	// that joins gets a listener even before a client's Metadata mentions it.
	MetadataRefresh time.Duration `yaml:"metadata_refresh"`
	// MetricsAddr serves Prometheus metrics at /metrics when set.
	MetricsAddr string `yaml:"metrics_addr"`
	// EventLoops is the number of gnet event loops per plaintext listener.
	EventLoops int `yaml:"event_loops"`
	// PlaintextEngine serves plaintext listeners: "netpoll" (default; Go's poller, a
	// goroutine per connection, listener_tcp.go) or "gnet" (event loops, listener_gnet.go).
	PlaintextEngine string `yaml:"plaintext_engine"`

	// TLS, when CertFile is set, makes every client listener TLS (crypto/tls).
	TLS ListenerTLS `yaml:"tls"`
	// UpstreamTLS configures TLS towards the brokers.
	UpstreamTLS UpstreamTLS `yaml:"upstream_tls"`
	// UpstreamSASL are kmirror's own credentials towards the destination: every client
	// kmirror builds (broker discovery, the state topic and ownership group, the copy
	// pipeline; see UpstreamClientOptions) uses them. Client connections authenticate end to
	// end because each maps to exactly one upstream connection.
	UpstreamSASL UpstreamSASL `yaml:"upstream_sasl"`
	// SecretsKeyFile holds the keys that encrypt mirrors' source secrets in
	// __mirror_state (coordinator/secrets; docs/SECURITY.md "Secrets"). The proxy
	// itself does not use it: the instance's mirroring does.
	SecretsKeyFile string `yaml:"secrets_key_file"`

	// ClientAuth is what a client must prove before kmirror answers it itself (mirror RPCs,
	// mirror config resources): "sasl", "mtls" or "none" (docs/SECURITY.md). Default: sasl
	// when upstream_sasl is set (the destination is SASL), mtls when tls.client_ca_file is
	// set, none otherwise.
	ClientAuth string `yaml:"client_auth"`
	// MTLSPolicy grants operations to client certificate principals in mtls mode.
	MTLSPolicy []MTLSGrant `yaml:"mtls_policy"`
	// AuditLog is where audit lines go: "stderr" (default), "stdout", or a file appended to.
	AuditLog string `yaml:"audit_log"`
	// ProxyProtocol makes every client listener expect a PROXY protocol v1 or v2 header (a
	// load balancer's, e.g. HAProxy's send-proxy-v2) and take the client address from it;
	// connections without one are refused (proxyproto.go, docs/deploy.md).
	ProxyProtocol bool `yaml:"proxy_protocol"`

	// Routes are application routes for zero-touch cut-over (route.go, docs/cutover.md):
	// listener sets leading to a mirror's source (the primary) until a switch.
	Routes []RouteConfig `yaml:"routes"`
}

// MTLSGrant gives a principal ("User:CN=ops,O=Example", as Kafka's default principal
// builder names a certificate subject; "User:*" for every certificate) operations on
// kmirror's RPCs: alter, describe, create (docs/SECURITY.md).
type MTLSGrant struct {
	Principal  string   `yaml:"principal"`
	Operations []string `yaml:"operations"`
}

// ListenerTLS is the server side TLS of client listeners.
type ListenerTLS struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"` // set: clients must present a certificate
}

// UpstreamTLS is the client side TLS towards the brokers.
type UpstreamTLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// UpstreamSASL are kmirror's own credentials towards the destination (PLAIN,
// SCRAM-SHA-256/512).
type UpstreamSASL struct {
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`
	Password  string `yaml:"password"`
}

// String shows the credentials without the password, so that a config printed with %v or
// %+v in a log or an error does not leak it.
func (s UpstreamSASL) String() string {
	if s.Mechanism == "" && s.Username == "" && s.Password == "" {
		return "{}"
	}
	return fmt.Sprintf("{mechanism:%s username:%s password:[redacted]}", s.Mechanism, s.Username)
}

// validate checks the mechanism and that credentials come whole; name is the key's
// name in the configuration (upstream_sasl, routes' primary.sasl).
func (s UpstreamSASL) validate(name string) error {
	switch strings.ToUpper(s.Mechanism) {
	case "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		return fmt.Errorf("%s.mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", name, s.Mechanism)
	}
	// Half-given credentials would silently leave kmirror unauthenticated (or fail later, at
	// the broker, with a less useful message).
	if s.Mechanism != "" && (s.Username == "" || s.Password == "") {
		return fmt.Errorf("%[1]s.mechanism %[2]s needs %[1]s.username and %[1]s.password", name, s.Mechanism)
	} else if s.Mechanism == "" && (s.Username != "" || s.Password != "") {
		return fmt.Errorf("%s: username and password need a mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", name)
	}
	return nil
}

// Defaults returns the configuration every unset field falls back to.
func Defaults() Config {
	return Config{
		Listen:          "0.0.0.0:9092",
		BrokerPortBase:  9100,
		BrokerPortCount: 100,
		MaxFrameBytes:   100 << 20,
		MaxInFlight:     64,
		IdleTimeout:     10 * time.Minute,
		DialTimeout:     10 * time.Second,
		ShutdownTimeout: 30 * time.Second,
		MetadataRefresh: 30 * time.Second,
		EventLoops:      runtime.GOMAXPROCS(0),
	}
}

// withDefaults fills unset fields.
func (c Config) withDefaults() Config {
	d := Defaults()
	c.Listen = cmp.Or(c.Listen, d.Listen)
	c.BrokerPortCount = cmp.Or(c.BrokerPortCount, d.BrokerPortCount)
	c.MaxFrameBytes = cmp.Or(c.MaxFrameBytes, d.MaxFrameBytes)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, d.MaxInFlight)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, d.IdleTimeout)
	c.DialTimeout = cmp.Or(c.DialTimeout, d.DialTimeout)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, d.ShutdownTimeout)
	c.MetadataRefresh = cmp.Or(c.MetadataRefresh, d.MetadataRefresh)
	c.EventLoops = cmp.Or(c.EventLoops, d.EventLoops)
	if c.ClientAuth == "" {
		switch {
		case c.UpstreamSASL.Mechanism != "":
			c.ClientAuth = ClientAuthSASL
		case c.TLS.ClientCAFile != "":
			c.ClientAuth = ClientAuthMTLS
		default:
			c.ClientAuth = ClientAuthNone
		}
	}
	c.ClientAuth = strings.ToLower(c.ClientAuth)
	c.AuditLog = cmp.Or(c.AuditLog, "stderr")
	host, _, _ := net.SplitHostPort(c.Listen)
	c.BrokerListenHost = cmp.Or(c.BrokerListenHost, host)
	if c.AdvertisedHost == "" {
		c.AdvertisedHost = host
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			c.AdvertisedHost = "localhost"
		}
	}
	return c
}

// Validate reports the first configuration error, phrased for an operator.
func (c Config) Validate() error {
	if len(c.Upstream) == 0 {
		return errors.New("no upstream brokers: set --upstream HOST:PORT[,HOST:PORT] or 'upstream' in the config file")
	}
	for _, u := range c.Upstream {
		if _, _, err := net.SplitHostPort(u); err != nil {
			return fmt.Errorf("upstream %q is not HOST:PORT: %w", u, err)
		}
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen %q is not HOST:PORT: %w", c.Listen, err)
	}
	if c.BrokerPortBase < 0 || c.BrokerPortBase+c.BrokerPortCount > 65536 {
		return fmt.Errorf("broker port range %d+%d does not fit in 1..65535", c.BrokerPortBase, c.BrokerPortCount)
	}
	if c.MaxFrameBytes < 1024 {
		return fmt.Errorf("max_frame_bytes %d is too small (minimum 1024)", c.MaxFrameBytes)
	}
	if e := c.PlaintextEngine; e != "" && e != EngineNetpoll && e != EngineGnet {
		return fmt.Errorf("plaintext_engine %q: want %q or %q", e, EngineNetpoll, EngineGnet)
	}
	if c.MaxInFlight < 1 {
		return fmt.Errorf("max_in_flight %d must be at least 1", c.MaxInFlight)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return errors.New("tls: cert_file and key_file must be set together")
	}
	if err := c.UpstreamSASL.validate("upstream_sasl"); err != nil {
		return err
	}
	if len(c.Routes) > 0 {
		if err := c.validateRoutes(); err != nil {
			return err
		}
	}
	switch c.ClientAuth {
	case ClientAuthSASL, ClientAuthNone, "":
		if len(c.MTLSPolicy) > 0 {
			return fmt.Errorf("mtls_policy is set but client_auth is %q: the policy applies only with client_auth mtls", c.ClientAuth)
		}
	case ClientAuthMTLS:
		if c.TLS.ClientCAFile == "" {
			return errors.New("client_auth mtls needs tls.client_ca_file (and cert_file, key_file): clients must present certificates")
		}
	default:
		return fmt.Errorf("client_auth %q: want sasl, mtls or none", c.ClientAuth)
	}
	for _, g := range c.MTLSPolicy {
		if !strings.HasPrefix(g.Principal, "User:") {
			return fmt.Errorf("mtls_policy principal %q: want User:<certificate subject>, e.g. User:CN=ops,O=Example", g.Principal)
		}
		for _, o := range g.Operations {
			if _, ok := mtlsOperations[strings.ToLower(o)]; !ok {
				return fmt.Errorf("mtls_policy operation %q for %s: want alter, describe or create", o, g.Principal)
			}
		}
	}
	return nil
}

// brokerPort returns the configured listener port of node id, false when the rule does
// not cover it (or ports are ephemeral).
func (c Config) brokerPort(node int32) (int, bool) {
	if p, ok := c.BrokerPorts[node]; ok {
		return p, true
	}
	if c.BrokerPortBase == 0 || node < 0 || int(node) >= c.BrokerPortCount {
		return 0, false
	}
	return c.BrokerPortBase + int(node), true
}

// LoadFile reads a YAML configuration file over cfg.
func LoadFile(path string, cfg *Config) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading proxy config: %w", err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		return fmt.Errorf("parsing proxy config %s: %w", path, err)
	}
	return nil
}

// ParseArgs builds a Config from defaults, then the --config file, then explicit flags (a
// flag given on the command line always wins over the file).
func ParseArgs(name string, args []string) (Config, error) {
	return ParseArgsWith(name, args, nil)
}

// ParseArgsWith is ParseArgs with more flags: extra registers them on the
// same flag set (the command's mirroring options), read after it returns.
func ParseArgsWith(name string, args []string, extra func(fs *flag.FlagSet)) (Config, error) {
	cfg := Defaults()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if extra != nil {
		extra(fs)
	}
	var (
		file     = fs.String("config", "", "YAML configuration file (flags override it)")
		upstream = fs.String("upstream", "", "destination bootstrap brokers, HOST:PORT[,HOST:PORT]")
		listen   = fs.String("listen", cfg.Listen, "bootstrap listener HOST:PORT")
		adv      = fs.String("advertised-host", "", "host returned to clients for broker listeners (load balancer name)")
		ports    = fs.String("broker-ports", "", "broker listener ports BASE[+COUNT]: node id N listens on BASE+N (0 = ephemeral)")
		maxFrame = fs.Int("max-frame-bytes", int(cfg.MaxFrameBytes), "largest request or response accepted")
		inflight = fs.Int("max-in-flight", cfg.MaxInFlight, "requests awaiting a response per connection before the proxy stops reading")
		idle     = fs.Duration("idle-timeout", cfg.IdleTimeout, "close connections idle this long")
		metrics  = fs.String("metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics")
		certFile = fs.String("tls-cert", "", "TLS certificate for client listeners")
		keyFile  = fs.String("tls-key", "", "TLS key for client listeners")
		clientCA = fs.String("tls-client-ca", "", "CA for client certificates (enables mutual TLS)")
		auth     = fs.String("client-auth", "", "what clients prove before kmirror answers them itself: sasl, mtls or none (default from upstream_sasl / tls client CA)")
		auditLog = fs.String("audit-log", "", "audit lines to stderr (default), stdout or a file")
		proxyPro = fs.Bool("proxy-protocol", false, "expect a PROXY protocol v1/v2 header on every client connection (behind a load balancer)")
	)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *file != "" {
		if err := LoadFile(*file, &cfg); err != nil {
			return cfg, err
		}
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "upstream":
			cfg.Upstream = mirrorconfig.List(*upstream)
		case "listen":
			cfg.Listen = *listen
		case "advertised-host":
			cfg.AdvertisedHost = *adv
		case "broker-ports":
			base, count, ok := strings.Cut(*ports, "+")
			cfg.BrokerPortBase, err = strconv.Atoi(base)
			if err == nil && ok {
				cfg.BrokerPortCount, err = strconv.Atoi(count)
			}
			if err != nil {
				err = fmt.Errorf("--broker-ports %q: want BASE or BASE+COUNT: %w", *ports, err)
			}
		case "max-frame-bytes":
			cfg.MaxFrameBytes = int32(*maxFrame)
		case "max-in-flight":
			cfg.MaxInFlight = *inflight
		case "idle-timeout":
			cfg.IdleTimeout = *idle
		case "metrics-addr":
			cfg.MetricsAddr = *metrics
		case "tls-cert":
			cfg.TLS.CertFile = *certFile
		case "tls-key":
			cfg.TLS.KeyFile = *keyFile
		case "tls-client-ca":
			cfg.TLS.ClientCAFile = *clientCA
		case "client-auth":
			cfg.ClientAuth = *auth
		case "audit-log":
			cfg.AuditLog = *auditLog
		case "proxy-protocol":
			cfg.ProxyProtocol = *proxyPro
		}
	})
	if err != nil {
		return cfg, err
	}
	cfg = cfg.withDefaults()
	return cfg, cfg.Validate()
}
