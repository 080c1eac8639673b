package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/freeport"
)

// RealConfig describes a real Apache Kafka cluster on loopback: KRaft, of combined
// broker+controller nodes, or brokers with a ZooKeeper of their own (ZooKeeper).
type RealConfig struct {
	Brokers int    // number of nodes, each broker and controller (default 1)
	Version string // Apache Kafka release, e.g. "3.6.2" (default KafkaVersion)
	// ZooKeeper runs the brokers in ZooKeeper mode (2.8–3.9) with one ZooKeeper server,
	// started from the same release's jars, instead of KRaft.
	ZooKeeper bool
	Dir       string            // working directory: configs, data, logs (required)
	Props     map[string]string // server.properties overrides
	// Detach starts the JVMs in their own session so they outlive this process
	// (the shell interface). Otherwise they die with this process.
	Detach bool
	// Listeners are listeners every broker has besides its client listener: PLAINTEXT, or
	// SASL_PLAINTEXT with the same users when SASL is set.
	Listeners []Listener
	// SASL makes the client listener SASL_PLAINTEXT with the StandardAuthorizer and the
	// harness users (see sasl.go); Users are users besides admin, kmirror and alice.
	SASL  bool
	Users []User
}

// Listener is a second client listener on every broker, on a free port of its own. A client
// that connects to it is told, in Metadata, that broker i is at Advertise(i): a plain TCP
// relay from that address to the listener then carries all of that client's traffic, with no
// rewriting (a broker advertises each listener's own addresses to the clients of that
// listener).
type Listener struct {
	Name      string // upper case, not PLAINTEXT or CONTROLLER
	Advertise func(i int) string
}

// RealCluster is a running real Kafka cluster.
type RealCluster struct {
	cfg       RealConfig
	version   Version
	libs      string
	clusterID string
	nodes     []*node
	zk        *node  // the ZooKeeper server in ZooKeeper mode, else nil
	users     []User // SASL users, admin first; nil without SASL
}

type node struct {
	id             int
	brokerPort     int
	controllerPort int
	extraPorts     []int // one per RealConfig.Listeners entry
	dir            string
	main           []string // main class and its arguments

	mu     sync.Mutex
	cmd    *exec.Cmd
	pid    int
	exited chan struct{} // closed when the current process has exited
}

// state is what the shell interface needs to find a detached cluster again.
type state struct {
	ClusterID string      `json:"cluster_id"`
	Bootstrap string      `json:"bootstrap"`
	Version   string      `json:"version"`
	Nodes     []nodeState `json:"nodes"`
	ZooKeeper *nodeState  `json:"zookeeper,omitempty"` // stopped after the brokers
}

type nodeState struct {
	ID   int    `json:"id"`
	PID  int    `json:"pid"`
	Addr string `json:"addr"`
}

const (
	startTimeout = 3 * time.Minute // a JVM on 2 busy cores can take 90 s to reach ZooKeeper
	stopTimeout  = 30 * time.Second
	portAttempts = 3
)

// StartReal formats and starts a real Kafka cluster and returns once every
// broker is listed in Metadata. Port clashes with other processes (free ports
// are picked, then bound by the JVM later) are retried on fresh ports.
func StartReal(ctx context.Context, cfg RealConfig) (*RealCluster, error) {
	if cfg.Brokers <= 0 {
		cfg.Brokers = 1
	}
	if cfg.Dir == "" {
		return nil, errors.New("kafkatest: RealConfig.Dir is required")
	}
	v, err := cfg.version()
	if err != nil {
		return nil, err
	}
	var users []User
	if cfg.SASL {
		if users, err = saslUsers(cfg.Users); err != nil {
			return nil, err
		}
	} else if len(cfg.Users) > 0 {
		return nil, errors.New("kafkatest: RealConfig.Users needs SASL")
	}
	libs, err := JarsFor(ctx, v)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 1; attempt <= portAttempts; attempt++ {
		c := &RealCluster{cfg: cfg, version: v, libs: libs, clusterID: randomClusterID(), users: users}
		if err := os.RemoveAll(cfg.Dir); err != nil {
			return nil, fmt.Errorf("kafkatest: clean %s: %w", cfg.Dir, err)
		}
		if err := c.layout(); err != nil {
			return nil, err
		}
		lastErr = c.start(ctx)
		if lastErr == nil {
			return c, nil
		}
		c.Stop()
		if !errors.Is(lastErr, errPortInUse) {
			break
		}
	}
	return nil, lastErr
}

var errPortInUse = errors.New("port already in use")

// version is the release cfg asks for, checked against what the harness can run in its mode.
func (cfg RealConfig) version() (Version, error) {
	s := cfg.Version
	if s == "" {
		s = KafkaVersion
	}
	v, err := ParseVersion(s)
	if err != nil {
		return Version{}, err
	}
	if err := v.Supported(cfg.ZooKeeper); err != nil {
		return Version{}, err
	}
	if cfg.ZooKeeper && (cfg.SASL || len(cfg.Listeners) > 0) {
		return Version{}, errors.New("kafkatest: ZooKeeper mode has one PLAINTEXT listener: no SASL, no extra listeners")
	}
	return v, nil
}

func (c *RealCluster) layout() error {
	per := 2 + len(c.cfg.Listeners)
	ports, err := freePorts(per*c.cfg.Brokers + 1)
	if err != nil {
		return err
	}
	var voters []string
	for i := 0; i < c.cfg.Brokers; i++ {
		n := &node{id: i + 1, brokerPort: ports[per*i], controllerPort: ports[per*i+1], extraPorts: ports[per*i+2 : per*(i+1)]}
		n.dir = filepath.Join(c.cfg.Dir, fmt.Sprintf("node-%d", n.id))
		n.main = []string{"kafka.Kafka", filepath.Join(n.dir, "server.properties")}
		c.nodes = append(c.nodes, n)
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", n.id, n.controllerPort))
	}
	if c.cfg.ZooKeeper {
		dir := filepath.Join(c.cfg.Dir, "zookeeper")
		c.zk = &node{brokerPort: ports[len(ports)-1], dir: dir,
			main: []string{"org.apache.zookeeper.server.ZooKeeperServerMain", filepath.Join(dir, "zookeeper.properties")}}
		if err := writeNodeFiles(c.zk, "zookeeper.properties", zooKeeperProperties(c.zk)); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := writeNodeFiles(n, "server.properties", c.serverProperties(n, voters)); err != nil {
			return err
		}
	}
	return nil
}

// writeNodeFiles makes a node's data directory and writes its config file and log4j2.properties.
func writeNodeFiles(n *node, configName, config string) error {
	if err := os.MkdirAll(filepath.Join(n.dir, "data"), 0o755); err != nil {
		return fmt.Errorf("kafkatest: create node dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(n.dir, configName), []byte(config), 0o644); err != nil {
		return fmt.Errorf("kafkatest: write %s: %w", configName, err)
	}
	if err := os.WriteFile(filepath.Join(n.dir, "log4j2.properties"), []byte(brokerLog4j(n.dir)), 0o644); err != nil {
		return fmt.Errorf("kafkatest: write log4j2.properties: %w", err)
	}
	return nil
}

// zooKeeperProperties configures a standalone ZooKeeper on loopback, without the admin
// server (it would take port 8080).
func zooKeeperProperties(n *node) string {
	return fmt.Sprintf("dataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\ntickTime=2000\n",
		filepath.Join(n.dir, "data"), n.brokerPort)
}

// modeProperties are the configs that differ between KRaft and ZooKeeper mode.
func (c *RealCluster) modeProperties(n *node, voters []string, listeners, advertised, protocols string) map[string]string {
	if c.zk != nil {
		return map[string]string{
			"broker.id":                      strconv.Itoa(n.id),
			"zookeeper.connect":              c.zk.addr(),
			"listeners":                      fmt.Sprintf("PLAINTEXT://%s", n.addr()),
			"advertised.listeners":           fmt.Sprintf("PLAINTEXT://%s", n.addr()),
			"inter.broker.listener.name":     "PLAINTEXT",
			"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT",
		}
	}
	return map[string]string{
		"process.roles":                  "broker,controller",
		"node.id":                        strconv.Itoa(n.id),
		"controller.quorum.voters":       strings.Join(voters, ","),
		"listeners":                      listeners,
		"advertised.listeners":           advertised,
		"controller.listener.names":      "CONTROLLER",
		"inter.broker.listener.name":     "PLAINTEXT",
		"listener.security.protocol.map": protocols,
	}
}

func (c *RealCluster) serverProperties(n *node, voters []string) string {
	rf := strconv.Itoa(min(3, c.cfg.Brokers))
	client, protocol := "PLAINTEXT", "PLAINTEXT"
	if c.cfg.SASL {
		client, protocol = saslListener, "SASL_PLAINTEXT"
	}
	listeners := fmt.Sprintf("%s://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", client, n.brokerPort, n.controllerPort)
	advertised := client + "://" + n.addr()
	protocols := fmt.Sprintf("%s:%s,CONTROLLER:%s", client, protocol, protocol)
	var extra []string
	for j, l := range c.cfg.Listeners {
		listeners += fmt.Sprintf(",%s://%s", l.Name, loopbackAddr(n.extraPorts[j]))
		advertised += fmt.Sprintf(",%s://%s", l.Name, l.Advertise(n.id-1))
		protocols += "," + l.Name + ":" + protocol
		extra = append(extra, l.Name)
	}
	props := c.modeProperties(n, voters, listeners, advertised, protocols)
	for k, v := range map[string]string{
		"log.dirs":                         filepath.Join(n.dir, "data"),
		"offsets.topic.replication.factor": rf,
		// Fewer internal partitions than the defaults (50) keep first use of
		// groups and transactions fast on a 2-core machine.
		"offsets.topic.num.partitions":                               "5",
		"transaction.state.log.num.partitions":                       "5",
		"transaction.state.log.replication.factor":                   rf,
		"transaction.state.log.min.isr":                              strconv.Itoa(min(2, c.cfg.Brokers)),
		"share.coordinator.state.topic.replication.factor":           rf,
		"share.coordinator.state.topic.min.isr":                      strconv.Itoa(min(2, c.cfg.Brokers)),
		"group.initial.rebalance.delay.ms":                           "0",
		"default.replication.factor":                                 rf,
		"min.insync.replicas":                                        "1",
		"controlled.shutdown.enable":                                 "true",
		"num.partitions":                                             "1",
		"log.flush.interval.messages":                                "9223372036854775807",
		"transaction.remove.expired.transaction.cleanup.interval.ms": "60000",
	} {
		props[k] = v
	}
	if c.cfg.SASL {
		for k, v := range saslServerProperties(c.users, extra) {
			props[k] = v
		}
	}
	for k, v := range c.cfg.Props {
		props[k] = v
	}
	return propertiesText(props)
}

// propertiesText writes props as a Java properties file, keys sorted.
func propertiesText(props map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(props)) {
		fmt.Fprintf(&b, "%s=%s\n", k, props[k])
	}
	return b.String()
}

func brokerLog4j(dir string) string {
	return `rootLogger.level=INFO
rootLogger.appenderRef.file.ref=file
appender.file.type=File
appender.file.name=file
appender.file.fileName=` + filepath.Join(dir, "server.log") + `
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
logger.kafka.name=kafka
logger.kafka.level=INFO
logger.state.name=state.change.logger
logger.state.level=WARN
`
}

func (c *RealCluster) start(ctx context.Context) error {
	if c.zk != nil {
		if err := c.startZooKeeper(ctx); err != nil {
			return err
		}
	} else if err := c.formatAll(ctx); err != nil {
		return err
	}
	for _, n := range c.nodes {
		if err := c.launch(n); err != nil {
			return err
		}
	}
	if err := c.waitReady(ctx, c.Bootstrap(), len(c.nodes)); err != nil {
		return err
	}
	if c.cfg.SASL {
		if err := c.grantACLs(ctx); err != nil {
			return err
		}
		if err := c.writeProperties(); err != nil {
			return err
		}
	}
	return c.writeState()
}

// startZooKeeper launches the ZooKeeper server and waits until it accepts connections.
func (c *RealCluster) startZooKeeper(ctx context.Context) error {
	if err := c.launch(c.zk); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		if c.zk.hasExited() {
			return c.zk.exitError()
		}
		conn, err := net.DialTimeout("tcp", c.zk.addr(), time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: ZooKeeper at %s not listening after %s: %v; log: %s",
				c.zk.addr(), startTimeout, err, filepath.Join(c.zk.dir, "server.log"))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// formatAll formats every KRaft node's storage.
func (c *RealCluster) formatAll(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.nodes))
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.format(ctx, n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *RealCluster) format(ctx context.Context, n *node) error {
	args := []string{"format", "-t", c.clusterID, "-c", filepath.Join(n.dir, "server.properties")}
	cmd := c.java(ctx, n.dir, "kafka.tools.StorageTool", append(args, scramFormatArgs(c.users)...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kafkatest: format node %d: %w\n%s", n.id, err, out)
	}
	return nil
}

// java builds a JVM command on the harness classpath. KMIRROR_KAFKA_JVM_OPTS
// replaces the default heap and GC options (benchmarks want full JIT).
func (c *RealCluster) java(ctx context.Context, dir, class string, args ...string) *exec.Cmd {
	return javaCommand(ctx, c.libs, filepath.Join(dir, "log4j2.properties"), class, args...)
}

func javaCommand(ctx context.Context, libs, log4j, class string, args ...string) *exec.Cmd {
	opts := strings.Fields(os.Getenv("KMIRROR_KAFKA_JVM_OPTS"))
	if len(opts) == 0 {
		opts = []string{"-Xms128m", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
			"-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true"}
	}
	jargs := append(opts, "-Dlog4j2.configurationFile="+log4j, "-cp", filepath.Join(libs, "*"), class)
	return exec.CommandContext(ctx, "java", append(jargs, args...)...)
}

func (c *RealCluster) launch(n *node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exited != nil {
		select {
		case <-n.exited:
		default:
			return fmt.Errorf("kafkatest: node %d is already running", n.id)
		}
	}
	// Not CommandContext: the broker's lifetime is the cluster's, not a call's.
	cmd := c.java(context.Background(), n.dir, n.main[0], n.main[1:]...)
	out, err := os.OpenFile(filepath.Join(n.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("kafkatest: open stdout log: %w", err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if c.cfg.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		// A test binary that dies (timeout panic, Ctrl-C) must not leave JVMs behind.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("kafkatest: start node %d: %w", n.id, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(exited)
	}()
	n.cmd, n.pid, n.exited = cmd, cmd.Process.Pid, exited
	return nil
}

// waitReady polls Metadata until it lists want brokers, failing early when a
// node process exits.
func (c *RealCluster) waitReady(ctx context.Context, seeds []string, want int) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DialTimeout(time.Second),
		kgo.RequestRetries(0), kgo.RetryTimeout(time.Second)}, c.adminOpts()...)...)
	if err != nil {
		return fmt.Errorf("kafkatest: client for readiness: %w", err)
	}
	defer cl.Close()
	for {
		for _, n := range c.processes() {
			if n.hasExited() {
				return n.exitError()
			}
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(rctx, cl)
		rcancel()
		if err == nil && len(resp.Brokers) >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: cluster in %s not ready after %s (last error: %v); logs: %s",
				c.cfg.Dir, startTimeout, err, c.logFiles())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// processes are the brokers and, in ZooKeeper mode, the ZooKeeper server.
func (c *RealCluster) processes() []*node {
	if c.zk == nil {
		return c.nodes
	}
	return append(append([]*node(nil), c.nodes...), c.zk)
}

func (n *node) hasExited() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return true
	default:
		return false
	}
}

func (n *node) exitError() error {
	tail := tailFile(filepath.Join(n.dir, "stdout.log"), 4096) + tailFile(filepath.Join(n.dir, "server.log"), 4096)
	err := fmt.Errorf("kafkatest: node %d exited during startup; logs in %s:\n%s", n.id, n.dir, tail)
	if strings.Contains(tail, "Address already in use") {
		return fmt.Errorf("%w: %w", errPortInUse, err)
	}
	return err
}

func tailFile(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max64(0, st.Size()-max)
	buf := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return string(buf)
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func (c *RealCluster) logFiles() string {
	var files []string
	for _, n := range c.nodes {
		files = append(files, filepath.Join(n.dir, "server.log"))
	}
	return strings.Join(files, " ")
}

func (c *RealCluster) writeState() error {
	st := state{ClusterID: c.clusterID, Bootstrap: strings.Join(c.Bootstrap(), ","), Version: c.version.String()}
	for _, n := range c.nodes {
		st.Nodes = append(st.Nodes, nodeState{ID: n.id, PID: n.pid, Addr: n.addr()})
	}
	if c.zk != nil {
		st.ZooKeeper = &nodeState{PID: c.zk.pid, Addr: c.zk.addr()}
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("kafkatest: encode state: %w", err)
	}
	return os.WriteFile(filepath.Join(c.cfg.Dir, "cluster.json"), b, 0o644)
}

func (n *node) addr() string { return loopbackAddr(n.brokerPort) }

func loopbackAddr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// Bootstrap lists every broker's address.
func (c *RealCluster) Bootstrap() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr()
	}
	return addrs
}

// ListenerAddrs lists, in the order of Bootstrap, where the brokers' listener called name
// listens (nil when there is none).
func (c *RealCluster) ListenerAddrs(name string) []string {
	for j, l := range c.cfg.Listeners {
		if l.Name != name {
			continue
		}
		addrs := make([]string, len(c.nodes))
		for i, n := range c.nodes {
			addrs[i] = loopbackAddr(n.extraPorts[j])
		}
		return addrs
	}
	return nil
}

// Version is the Apache Kafka release the brokers run.
func (c *RealCluster) Version() Version { return c.version }

// ZooKeeper reports whether the brokers run in ZooKeeper mode.
func (c *RealCluster) ZooKeeper() bool { return c.zk != nil }

// Mode is "ZooKeeper" or "KRaft".
func (c *RealCluster) Mode() string {
	if c.zk != nil {
		return "ZooKeeper"
	}
	return "KRaft"
}

// ClusterID is the id the storage was formatted with (KRaft mode; ZooKeeper mode makes its own).
func (c *RealCluster) ClusterID() string { return c.clusterID }

// Dir is the cluster's working directory (configs, data, logs).
func (c *RealCluster) Dir() string { return c.cfg.Dir }

// NodeIDs lists the node ids, which are 1..n in node order.
func (c *RealCluster) NodeIDs() []int32 {
	ids := make([]int32, len(c.nodes))
	for i, n := range c.nodes {
		ids[i] = int32(n.id)
	}
	return ids
}

// StopNode stops node i (0-based) gracefully, or with SIGKILL when kill is set
// or the graceful stop does not finish in time.
func (c *RealCluster) StopNode(i int, kill bool) error {
	return c.nodes[i].stop(kill)
}

func (n *node) stop(kill bool) error {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return nil
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("kafkatest: node %d did not stop within %s and was killed", n.id, stopTimeout)
}

// SignalNode sends sig to node i (SIGSTOP/SIGCONT freeze and thaw it).
func (c *RealCluster) SignalNode(i int, sig syscall.Signal) error {
	n := c.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("kafkatest: node %d is not running", n.id)
	}
	return n.cmd.Process.Signal(sig)
}

// StartNode restarts a stopped node i (0-based) and waits until it serves
// Metadata again.
func (c *RealCluster) StartNode(ctx context.Context, i int) error {
	if err := c.launch(c.nodes[i]); err != nil {
		return err
	}
	return c.waitReady(ctx, []string{c.nodes[i].addr()}, len(c.nodes))
}

// Stop stops every node (gracefully, in parallel), then ZooKeeper (brokers need it to shut
// down), and leaves the directory.
func (c *RealCluster) Stop() error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.nodes)+1)
	for i := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.StopNode(i, false)
		}()
	}
	wg.Wait()
	if c.zk != nil {
		errs[len(c.nodes)] = c.zk.stop(false)
	}
	return errors.Join(errs...)
}

// StopDetached stops a cluster started with Detach by another process, found
// through the state file in dir.
func StopDetached(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cluster.json"))
	if err != nil {
		return fmt.Errorf("kafkatest: no cluster state in %s: %w", dir, err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("kafkatest: decode %s/cluster.json: %w", dir, err)
	}
	terminate(st.Nodes)
	if st.ZooKeeper != nil {
		terminate([]nodeState{*st.ZooKeeper})
	}
	return nil
}

// terminate sends SIGTERM to the processes and SIGKILL to those still alive after stopTimeout.
func terminate(nodes []nodeState) {
	for _, n := range nodes {
		_ = syscall.Kill(n.PID, syscall.SIGTERM)
	}
	deadline := time.Now().Add(stopTimeout)
	for _, n := range nodes {
		for processAlive(n.PID) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if processAlive(n.PID) {
			_ = syscall.Kill(n.PID, syscall.SIGKILL)
		}
	}
}

// ReadBootstrap returns the bootstrap address of a detached cluster.
func ReadBootstrap(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cluster.json"))
	if err != nil {
		return "", fmt.Errorf("kafkatest: no cluster state in %s: %w", dir, err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return "", fmt.Errorf("kafkatest: decode cluster state: %w", err)
	}
	return st.Bootstrap, nil
}

func processAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	// A zombie is dead for our purposes.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b))
	return len(fields) < 3 || fields[2] != "Z"
}

func freePorts(n int) ([]int, error) {
	ports, err := freeport.Ports(n)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: %w", err)
	}
	return ports, nil
}

// randomClusterID makes a Kafka cluster id: 16 random bytes, URL-safe base64
// without padding, as `kafka-storage random-uuid` prints.
// An id starting with '-' would read as an option to StorageTool's argument
// parser, so such ids are drawn again.
func randomClusterID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}

// PIDs are the process ids of the running brokers (benchmarks read their CPU from /proc).
func (c *RealCluster) PIDs() []int {
	var pids []int
	for _, n := range c.processes() {
		n.mu.Lock()
		if n.cmd != nil {
			pids = append(pids, n.pid)
		}
		n.mu.Unlock()
	}
	return pids
}
