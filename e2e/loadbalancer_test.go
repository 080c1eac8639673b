package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/metricstest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/internal/syncbuf"
	"github.com/kmirror/kmirror/protocol"
)

// lbLayout is what haproxy.cfg depends on: the balancer's address and ports, the instances,
// and their metrics port (health checks).
type lbLayout struct {
	Host                    string   // the balancer binds here; kmirror's advertised_host
	Bootstrap               int      // the bootstrap port (kmirror's listen port)
	BrokerFirst, BrokerLast int      // the broker port range (kmirror's broker_ports BASE+COUNT)
	Metrics                 int      // kmirror's metrics port: /ready
	Instances               []string // kmirror instances' hosts
	Socket                  string   // HAProxy's admin socket
}

// haproxyTemplate is the configuration docs/deploy.md shows (TestDeployDocHAProxyConfig keeps
// the two the same) and the load-balancer test runs.
var haproxyTemplate = template.Must(template.New("haproxy.cfg").Funcs(template.FuncMap{"inc": func(i int) int { return i + 1 }}).Parse(
	`global
    stats socket {{.Socket}} mode 600 level admin

defaults
    mode tcp
    timeout connect 5s
    # Kafka connections live long and may idle up to connections.max.idle.ms (kmirror's
    # idle_timeout, 10 min): longer, so the balancer never cuts an idle client first.
    timeout client 11m
    timeout server 11m
    # Health check: GET /ready on each instance's metrics port (503 until it has joined the
    # coordinator group and read __mirror_state). A server marked down loses its sessions,
    # so clients reconnect through the balancer at once.
    option httpchk GET /ready
    http-check expect status 200
    default-server check port {{.Metrics}} inter 1s fall 2 rise 2 send-proxy-v2 on-marked-down shutdown-sessions

frontend kafka-bootstrap
    bind {{.Host}}:{{.Bootstrap}}
    default_backend kmirror-bootstrap

frontend kafka-brokers
    bind {{.Host}}:{{.BrokerFirst}}-{{.BrokerLast}}
    default_backend kmirror-brokers

backend kmirror-bootstrap
    balance leastconn
{{- range $i, $h := .Instances}}
    server kmirror-{{inc $i}} {{$h}}:{{$.Bootstrap}}
{{- end}}

# Every instance serves every broker port (the port rule needs no coordination); a server
# without a port takes the port the client connected to.
backend kmirror-brokers
    balance leastconn
{{- range $i, $h := .Instances}}
    server kmirror-{{inc $i}} {{$h}}
{{- end}}
`))

func haproxyConfig(l lbLayout) string {
	var b strings.Builder
	if err := haproxyTemplate.Execute(&b, l); err != nil {
		panic(err)
	}
	return b.String()
}

// docLayout is the layout of docs/deploy.md's example.
var docLayout = lbLayout{Host: "0.0.0.0", Bootstrap: 9092, BrokerFirst: 9100, BrokerLast: 9199, Metrics: 9464,
	Instances: []string{"kmirror-1.internal", "kmirror-2.internal", "kmirror-3.internal"}, Socket: "/run/haproxy/admin.sock"}

// The haproxy.cfg in docs/deploy.md is the one the load-balancer test runs.
func TestDeployDocHAProxyConfig(t *testing.T) {
	t.Parallel() // each test owns its clusters and instances (make test's wall time)
	doc, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```haproxy\n")
	block, _, closed := strings.Cut(block, "```")
	if !ok || !closed {
		t.Fatal("docs/deploy.md has no ```haproxy block")
	}
	if want := haproxyConfig(docLayout); block != want {
		t.Fatalf("docs/deploy.md's haproxy.cfg differs from the tested one; replace it with:\n%s", want)
	}
}

// freePortRange finds n consecutive ports free on every host.
func freePortRange(t *testing.T, n int, hosts ...string) int {
	t.Helper()
	for range 50 {
		base := 20000 + rand.IntN(20000)
		var ls []net.Listener
		ok := true
		for p := base; p < base+n && ok; p++ {
			for _, h := range hosts {
				l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(p)))
				if err != nil {
					ok = false
					break
				}
				ls = append(ls, l)
			}
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

// haproxy is a running HAProxy.
type haproxy struct {
	socket string
	cmd    *exec.Cmd
	out    *syncbuf.Buffer
}

func startHAProxy(t *testing.T, l lbLayout) *haproxy {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(haproxyConfig(l)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("haproxy", "-c", "-f", cfg).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	h := &haproxy{socket: l.Socket, cmd: exec.Command("haproxy", "-db", "-f", cfg), out: &syncbuf.Buffer{}}
	h.cmd.Stdout, h.cmd.Stderr = h.out, h.out
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = h.cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = h.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("haproxy output:\n%s", h.out)
		}
	})
	return h
}

// serverStatus asks HAProxy's admin socket for the status of every server and its last
// check: "backend/server" -> "UP L7OK", "DOWN L4CON", ... (HAProxy counts a server UP before
// its first check; L7OK says /ready answered 200).
func (h *haproxy) serverStatus() (map[string]string, error) {
	c, err := net.DialTimeout("unix", h.socket, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "show stat\n"); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return nil, err
	}
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(b, []byte("# "))))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil || len(rows) == 0 {
		return nil, fmt.Errorf("show stat: %v: %q", err, b)
	}
	status, check := slices.Index(rows[0], "status"), slices.Index(rows[0], "check_status")
	out := map[string]string{}
	for _, row := range rows[1:] {
		if len(row) > max(status, check) && row[1] != "FRONTEND" && row[1] != "BACKEND" {
			out[row[0]+"/"+row[1]] = row[status] + " " + row[check]
		}
	}
	return out, nil
}

func (h *haproxy) waitStatus(t *testing.T, want map[string]string) {
	t.Helper()
	polltest.Eventually(t, time.Minute, fmt.Sprintf("HAProxy's health checks: %v", want), func() (bool, string) {
		got, err := h.serverStatus()
		if err != nil {
			return false, err.Error()
		}
		for k, v := range want {
			if !strings.HasPrefix(got[k], v) {
				return false, fmt.Sprint(got)
			}
		}
		return true, ""
	})
}

// addrRecorder collects every broker address a franz-go client heard of (metadata) or dialed.
type addrRecorder struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (r *addrRecorder) add(a string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	r.seen[a] = true
}

// OnBrokerConnect: meta is the broker as the client's metadata names it.
func (r *addrRecorder) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, _ error) {
	r.add(net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port))))
}

// clientHost is the source address of the test's franz-go clients: an address neither
// HAProxy (127.0.0.1) nor the instances use, so the audit line shows whose address it got.
const clientHost = "127.0.0.5"

// lbClient is a franz-go client through the balancer, from clientHost, recording addresses.
func lbClient(t *testing.T, seed string, rec *addrRecorder, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(clientHost)}}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		rec.add(addr)
		return d.DialContext(ctx, network, addr)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seed), kgo.Dialer(dial), kgo.WithHooks(rec)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Issue 20 part 1: HAProxy (TCP mode, send-proxy-v2, health checks on /ready) in front of
// three kmirror processes; franz-go and the Java client produce and consume through it while
// one instance is killed; every record arrives exactly once, no client ever hears of a real
// broker address, and the audit line names the client's own address.
func TestHAProxyInFrontOfThreeInstances(t *testing.T) {
	t.Parallel() // each test owns its clusters and instances (make test's wall time)
	buildBin := instancetest.BinaryLater(t)
	dst := kafkatest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// The state topic exists before the instances start, so each must join the group and read
	// it before /ready lets HAProxy send it clients.
	adm := kadm.NewClient(dst.Client(t))
	if _, err := adm.CreateTopic(ctx, 10, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, statetopic.TopicName); err != nil {
		t.Fatal(err)
	}
	hosts := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	nodes := dst.NodeIDs()
	count := int(slices.Max(nodes)) + 1
	base := freePortRange(t, count+2, append([]string{"127.0.0.1"}, hosts...)...)
	l := lbLayout{Host: "127.0.0.1", Bootstrap: base + count, Metrics: base + count + 1, BrokerFirst: base, BrokerLast: base + count - 1,
		Instances: hosts, Socket: filepath.Join(t.TempDir(), "haproxy.sock")}
	bin := buildBin(t)
	var procs []*process
	for i, h := range hosts {
		p := &process{t: t, bin: bin, name: fmt.Sprintf("kmirror-%d", i+1), addr: net.JoinHostPort(h, strconv.Itoa(l.Bootstrap)),
			mAddr: net.JoinHostPort(h, strconv.Itoa(l.Metrics))}
		p.args = []string{"proxy", "--upstream", dst.BootstrapString(), "--listen", p.addr, "--advertised-host", l.Host,
			"--broker-ports", fmt.Sprintf("%d+%d", base, count), "--metrics-addr", p.mAddr, "--proxy-protocol",
			"--state-partitions", "10", "--session-timeout", "6s", "--log-level", "info"}
		p.start()
		t.Cleanup(p.kill)
		procs = append(procs, p)
	}
	lb := startHAProxy(t, l)
	allUp := map[string]string{}
	for i := range hosts {
		allUp[fmt.Sprintf("kmirror-bootstrap/kmirror-%d", i+1)] = "UP L7OK"
		allUp[fmt.Sprintf("kmirror-brokers/kmirror-%d", i+1)] = "UP L7OK"
	}
	lb.waitStatus(t, allUp)
	seed := net.JoinHostPort(l.Host, strconv.Itoa(l.Bootstrap))

	var rec addrRecorder
	const goTopic, javaTopic, nGo, nJava = "lb-go", "lb-java", 30_000, 2_000
	for _, tp := range []struct {
		name  string
		parts int32
	}{{goTopic, 3}, {javaTopic, 1}} {
		if _, err := adm.CreateTopic(ctx, tp.parts, 1, nil, tp.name); err != nil {
			t.Fatal(err)
		}
	}

	// franz-go: an idempotent producer and a consumer (no group: it tracks its own offsets,
	// so a duplicate it sees is a duplicate in the log) through the balancer.
	prod := lbClient(t, seed, &rec, kgo.DefaultProduceTopic(goTopic), kgo.ProducerLinger(5*time.Millisecond))
	cons := lbClient(t, seed, &rec, kgo.ConsumeTopics(goTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := make([]int, nGo)
	var seenMu sync.Mutex
	var consumed int
	consDone := make(chan error, 1)
	go func() {
		for consumed < nGo && ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			seenMu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				i, _ := strconv.Atoi(string(r.Value))
				seen[i]++
				consumed++
			})
			seenMu.Unlock()
		}
		consDone <- ctx.Err()
	}()
	// The producer writes the first half, says so, and waits: the second half starts the
	// moment the test kills an instance, so the kill lands on Produce requests in flight.
	prodDone, firstHalf, secondHalf := make(chan error, 1), make(chan struct{}), make(chan struct{})
	var acked sync.WaitGroup
	go func() {
		var mu sync.Mutex
		var first error
		for i := range nGo {
			if i == nGo/2 {
				_ = prod.Flush(ctx)
				close(firstHalf)
				select {
				case <-secondHalf:
				case <-ctx.Done():
				}
			}
			acked.Add(1)
			prod.Produce(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}, func(_ *kgo.Record, err error) {
				defer acked.Done()
				if err != nil {
					mu.Lock()
					first = firstErr(first, err)
					mu.Unlock()
				}
			})
		}
		acked.Wait()
		prodDone <- first
	}()

	// The Java client: ConsoleConsumer reads the partition (no group) while ConsoleProducer
	// writes it, half before the kill and half after.
	javaOut := &syncbuf.Buffer{}
	jcons, err := kafkatest.ToolCommand(ctx, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", seed,
		"--topic", javaTopic, "--partition", "0", "--offset", "earliest", "--max-messages", strconv.Itoa(nJava), "--timeout-ms", "180000")
	if err != nil {
		t.Fatal(err)
	}
	javaErr := &syncbuf.Buffer{}
	jcons.Stdout, jcons.Stderr = javaOut, javaErr
	if err := jcons.Start(); err != nil {
		t.Fatal(err)
	}
	jprod, err := kafkatest.ToolCommand(ctx, "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", seed, "--topic", javaTopic,
		"--producer-property", "enable.idempotence=true", "--producer-property", "acks=all")
	if err != nil {
		t.Fatal(err)
	}
	jin, err := jprod.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	jprodOut := &syncbuf.Buffer{}
	jprod.Stdout, jprod.Stderr = jprodOut, jprodOut
	if err := jprod.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ConsoleProducer output:\n%s\nConsoleConsumer stderr:\n%s", jprodOut, javaErr)
		}
	})
	jw := bufio.NewWriter(jin)
	for i := range nJava / 2 {
		fmt.Fprintf(jw, "j%d\n", i)
	}
	_ = jw.Flush()

	endOf := func(topic string) int64 {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return -1
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n
	}
	// JVMs start slowly on a loaded machine: up to 3 minutes.
	polltest.Eventually(t, 3*time.Minute, "both producers half-way", func() (bool, string) {
		select {
		case <-firstHalf:
		default:
			return false, fmt.Sprintf("franz-go at %d of %d", endOf(goTopic), nGo/2)
		}
		j := endOf(javaTopic)
		return j >= nJava/2, fmt.Sprintf("ConsoleProducer at %d of %d\n%s", j, nJava/2, jprodOut)
	})
	// Kill the instance with the most open client connections: the kill must cut clients off.
	victim, conns := busiestInstance(t, procs)
	close(secondHalf)
	procs[victim].kill()
	t.Logf("killed %s (%d open client connections) with %s at %d of %d records", procs[victim].name, conns, goTopic, endOf(goTopic), nGo)
	lb.waitStatus(t, map[string]string{"kmirror-bootstrap/" + procs[victim].name: "DOWN", "kmirror-brokers/" + procs[victim].name: "DOWN"})
	live := slices.Delete(slices.Clone(procs), victim, victim+1)
	for i := nJava / 2; i < nJava; i++ {
		fmt.Fprintf(jw, "j%d\n", i)
	}
	_ = jw.Flush()
	_ = jin.Close()
	if err := jprod.Wait(); err != nil {
		t.Fatalf("ConsoleProducer through HAProxy: %v\n%s", err, jprodOut)
	}
	if err := <-prodDone; err != nil {
		t.Fatalf("franz-go producer through HAProxy: %v", err)
	}
	if err := <-consDone; err != nil {
		t.Fatalf("franz-go consumer through HAProxy: %v (read %d of %d)", err, consumed, nGo)
	}
	if err := jcons.Wait(); err != nil {
		t.Fatalf("ConsoleConsumer through HAProxy: %v\n%s", err, javaErr)
	}

	// Exactly once: in the log, and as each client saw it.
	if g, j := endOf(goTopic), endOf(javaTopic); g != nGo || j != nJava {
		t.Fatalf("the log holds %d records of %s (want %d) and %d of %s (want %d)", g, goTopic, nGo, j, javaTopic, nJava)
	}
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("franz-go consumer saw record %d %d times", i, n)
		}
	}
	lines := strings.Fields(javaOut.String())
	slices.Sort(lines)
	want := make([]string, nJava)
	for i := range want {
		want[i] = fmt.Sprintf("j%d", i)
	}
	slices.Sort(want)
	if !slices.Equal(lines, want) {
		t.Fatalf("ConsoleConsumer read %d lines, want j0..j%d once each\n%s", len(lines), nJava-1, javaErr)
	}

	checkNoRealAddress(t, ctx, dst, l, seed, &rec)
	checkAuditClientAddress(t, ctx, seed, &rec, live)
}

var openConns = regexp.MustCompile(`(?m)^kmirror_proxy_connections\{[^}]*\} (\d+)`)

// busiestInstance is the index of the instance with the most open client connections (its
// kmirror_proxy_connections), which must be at least one.
func busiestInstance(t *testing.T, procs []*process) (int, int) {
	t.Helper()
	best, most := 0, 0
	for i, p := range procs {
		body, err := metricstest.Scrape(p.mAddr)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range openConns.FindAllStringSubmatch(body, -1) {
			v, _ := strconv.Atoi(m[1])
			n += v
		}
		if n > most {
			best, most = i, n
		}
	}
	if most == 0 {
		t.Fatal("no instance has an open client connection mid-run")
	}
	return best, most
}

func firstErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// checkNoRealAddress: every broker address franz-go heard of or dialed, and every broker the
// Java admin client's metadata named (BrokerApiVersionsCommand), is the balancer's.
func checkNoRealAddress(t *testing.T, ctx context.Context, dst *kafkatest.Cluster, l lbLayout, seed string, rec *addrRecorder) {
	t.Helper()
	out, err := kafkatest.RunTool(t, ctx, "org.apache.kafka.tools.BrokerApiVersionsCommand", "--bootstrap-server", seed)
	if err != nil {
		t.Fatal(err)
	}
	java := regexp.MustCompile(`(?m)^(\S+:\d+) \(id: `).FindAllStringSubmatch(out, -1)
	if len(java) == 0 {
		t.Fatalf("BrokerApiVersionsCommand named no broker:\n%s", out)
	}
	rec.mu.Lock()
	addrs := slices.Sorted(func(yield func(string) bool) {
		for a := range rec.seen {
			if !yield(a) {
				return
			}
		}
	})
	rec.mu.Unlock()
	for _, m := range java {
		addrs = append(addrs, m[1])
	}
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		if host != l.Host || (p != l.Bootstrap && (p < l.BrokerFirst || p > l.BrokerLast)) || slices.Contains(dst.Bootstrap(), a) {
			t.Fatalf("a client heard of or dialed %s, not the balancer's address (all: %v)", a, addrs)
		}
	}
	t.Logf("clients saw only the balancer's addresses: %v", addrs)
}

// checkAuditClientAddress: a mirror RPC through the balancer is audited under the client's
// own address (clientHost), which only the PROXY header carried to the instance.
func checkAuditClientAddress(t *testing.T, ctx context.Context, seed string, rec *addrRecorder, live []*process) {
	t.Helper()
	cl := lbClient(t, seed, rec, kgo.MaxVersions(protocol.KgoMaxVersions(nil)))
	if _, err := cl.Request(ctx, protocol.NewPtrListMirrorsRequest()); err != nil {
		t.Fatalf("ListMirrors through HAProxy: %v", err)
	}
	polltest.Eventually(t, 30*time.Second, "an audit line naming the client's own address", func() (bool, string) {
		for _, p := range live {
			b, _ := os.ReadFile(p.logPath)
			for line := range strings.Lines(string(b)) {
				if strings.Contains(line, `"api":"ListMirrors"`) {
					if strings.Contains(line, `"client":"`+clientHost+":") {
						t.Logf("%s audit: %s", p.name, strings.TrimSpace(line))
						return true, ""
					}
					return false, "audit line without the client's address: " + line
				}
			}
		}
		return false, "no ListMirrors audit line yet"
	})
}
