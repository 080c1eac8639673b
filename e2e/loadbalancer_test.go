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
var haproxyTemplate = newHAProxyTemplate(
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
    # A connection sent to an instance that has just died (before two failed checks mark it
    # down) is sent to another one: the client sees its connect succeed, never a connection
    # closed before the first answer, which franz-go takes for a TLS or SASL mistake and does
    # not retry (kgo.ErrFirstReadEOF).
    retries 3
    option redispatch 1

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
`)

func haproxyConfig(l lbLayout) string { return render(haproxyTemplate, l) }

// newHAProxyTemplate parses an haproxy.cfg template; inc numbers servers from 1.
func newHAProxyTemplate(text string) *template.Template {
	return template.Must(template.New("haproxy.cfg").Funcs(template.FuncMap{"inc": func(i int) int { return i + 1 }}).Parse(text))
}

// render executes a template the tests own (a failure is a bug in the template).
func render(t *template.Template, data any) string {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		panic(err)
	}
	return b.String()
}

// docLayout is the layout of docs/deploy.md's example.
var docLayout = lbLayout{Host: "0.0.0.0", Bootstrap: 9092, BrokerFirst: 9100, BrokerLast: 9199, Metrics: 9464,
	Instances: []string{"kmirror-1.internal", "kmirror-2.internal", "kmirror-3.internal"}, Socket: "/run/haproxy/admin.sock"}

// The haproxy.cfg in docs/deploy.md is the one the load-balancer test runs.
func TestDeployDocHAProxyConfig(t *testing.T) {
	if block, want := deployDocBlock(t, "haproxy"), haproxyConfig(docLayout); block != want {
		t.Fatalf("docs/deploy.md's haproxy.cfg differs from the tested one; replace it with:\n%s", want)
	}
}

// deployDocBlock is the text of docs/deploy.md's code block whose fence line is ```info.
func deployDocBlock(t *testing.T, info string) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```"+info+"\n")
	block, _, closed := strings.Cut(block, "```")
	if !ok || !closed {
		t.Fatalf("docs/deploy.md has no ```%s block", info)
	}
	return block
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
	return startHAProxyWith(t, haproxyConfig(l), l.Socket)
}

// startHAProxyWith runs HAProxy with the configuration text config, whose admin socket is
// socket, until the test ends.
func startHAProxyWith(t *testing.T, config, socket string) *haproxy {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("haproxy", "-c", "-f", cfg).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	h := &haproxy{socket: socket, cmd: exec.Command("haproxy", "-db", "-f", cfg), out: &syncbuf.Buffer{}}
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
	rows, err := h.showStat()
	if err != nil {
		return nil, err
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

// redispatches is how many connections HAProxy gave another server of backend after theirs
// failed ("wredis"): a restarted instance's route refuses connections until it opens.
func (h *haproxy) redispatches(backend string) (string, error) {
	rows, err := h.showStat()
	if err != nil {
		return "", err
	}
	col := slices.Index(rows[0], "wredis")
	for _, row := range rows[1:] {
		if len(row) > col && col >= 0 && row[0] == backend && row[1] == "BACKEND" {
			return row[col], nil
		}
	}
	return "", fmt.Errorf("show stat: no backend %s with wredis", backend)
}

// showStat is HAProxy's "show stat" CSV, its header first.
func (h *haproxy) showStat() ([][]string, error) {
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
	return rows, nil
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
	l, procs := startBalancedInstances(t, dst, buildBin(t))
	lb := startHAProxy(t, l)
	allUp := map[string]string{}
	for i := range procs {
		allUp[fmt.Sprintf("kmirror-bootstrap/kmirror-%d", i+1)] = "UP L7OK"
		allUp[fmt.Sprintf("kmirror-brokers/kmirror-%d", i+1)] = "UP L7OK"
	}
	lb.waitStatus(t, allUp)
	seed := net.JoinHostPort(l.Host, strconv.Itoa(l.Bootstrap))
	for _, tp := range []struct {
		name  string
		parts int32
	}{{lbGoTopic, 3}, {lbJavaTopic, 1}} {
		if _, err := adm.CreateTopic(ctx, tp.parts, 1, nil, tp.name); err != nil {
			t.Fatal(err)
		}
	}

	var rec addrRecorder
	franz := startFranzLoad(ctx, t, seed, &rec)
	java := startJavaLoad(ctx, t, seed)
	java.write(0, lbJavaRecords/2)
	endOf := func(topic string) int64 { return topicEnd(ctx, adm, topic) }
	// JVMs start slowly on a loaded machine: up to 3 minutes.
	polltest.Eventually(t, 3*time.Minute, "both producers half-way", func() (bool, string) {
		select {
		case <-franz.firstHalf:
		default:
			return false, fmt.Sprintf("franz-go at %d of %d", endOf(lbGoTopic), lbGoRecords/2)
		}
		j := endOf(lbJavaTopic)
		return j >= lbJavaRecords/2, fmt.Sprintf("ConsoleProducer at %d of %d\n%s", j, lbJavaRecords/2, java.prodOut)
	})
	// Kill the instance with the most open client connections: the kill must cut clients off.
	victim, conns := busiestInstance(t, procs)
	close(franz.secondHalf)
	procs[victim].kill()
	t.Logf("killed %s (%d open client connections) with %s at %d of %d records", procs[victim].name, conns, lbGoTopic, endOf(lbGoTopic), lbGoRecords)
	lb.waitStatus(t, map[string]string{"kmirror-bootstrap/" + procs[victim].name: "DOWN", "kmirror-brokers/" + procs[victim].name: "DOWN"})
	live := slices.Delete(slices.Clone(procs), victim, victim+1)
	java.write(lbJavaRecords/2, lbJavaRecords)
	java.finish(t)
	franz.finish(t)

	// Exactly once: in the log, and as each client saw it.
	if g, j := endOf(lbGoTopic), endOf(lbJavaTopic); g != lbGoRecords || j != lbJavaRecords {
		t.Fatalf("the log holds %d records of %s (want %d) and %d of %s (want %d)", g, lbGoTopic, lbGoRecords, j, lbJavaTopic, lbJavaRecords)
	}
	franz.checkOnce(t)
	java.checkOnce(t)
	checkNoRealAddress(t, ctx, dst, l, seed, &rec)
	checkAuditClientAddress(t, ctx, seed, &rec, live)
}

// The balancer test's topics and how many records each client writes.
const lbGoTopic, lbJavaTopic, lbGoRecords, lbJavaRecords = "lb-go", "lb-java", 30_000, 2_000

// startBalancedInstances starts three kmirror processes on loopback addresses of their own
// (so a PROXY header is the only way they learn the clients' addresses), each expecting
// PROXY protocol, with the port layout HAProxy forwards.
func startBalancedInstances(t *testing.T, dst *kafkatest.Cluster, bin string) (lbLayout, []*process) {
	hosts := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	count := int(slices.Max(dst.NodeIDs())) + 1
	base := freePortRange(t, count+2, append([]string{"127.0.0.1"}, hosts...)...)
	l := lbLayout{Host: "127.0.0.1", Bootstrap: base + count, Metrics: base + count + 1, BrokerFirst: base, BrokerLast: base + count - 1,
		Instances: hosts, Socket: filepath.Join(t.TempDir(), "haproxy.sock")}
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
	return l, procs
}

// topicEnd is the sum of a topic's end offsets, -1 when they cannot be read.
func topicEnd(ctx context.Context, adm *kadm.Client, topic string) int64 {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return -1
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// franzLoad is franz-go's side of the balancer test: an idempotent producer and a consumer
// (no group: it tracks its own offsets, so a duplicate it sees is a duplicate in the log).
// The producer writes the first half, closes firstHalf and waits for secondHalf: the second
// half starts the moment the test kills an instance, so the kill lands on Produce requests
// in flight.
type franzLoad struct {
	firstHalf, secondHalf chan struct{}
	prodDone, consDone    chan error
	mu                    sync.Mutex
	seen                  []int
	consumed              int
}

func startFranzLoad(ctx context.Context, t *testing.T, seed string, rec *addrRecorder) *franzLoad {
	f := &franzLoad{firstHalf: make(chan struct{}), secondHalf: make(chan struct{}), prodDone: make(chan error, 1),
		consDone: make(chan error, 1), seen: make([]int, lbGoRecords)}
	prod := lbClient(t, seed, rec, kgo.DefaultProduceTopic(lbGoTopic), kgo.ProducerLinger(5*time.Millisecond))
	cons := lbClient(t, seed, rec, kgo.ConsumeTopics(lbGoTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	go func() {
		for f.count() < lbGoRecords && ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			f.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				i, _ := strconv.Atoi(string(r.Value))
				f.seen[i]++
				f.consumed++
			})
			f.mu.Unlock()
		}
		f.consDone <- ctx.Err()
	}()
	go func() { f.prodDone <- f.produce(ctx, prod) }()
	return f
}

func (f *franzLoad) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.consumed
}

func (f *franzLoad) produce(ctx context.Context, prod *kgo.Client) error {
	var acked sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := range lbGoRecords {
		if i == lbGoRecords/2 {
			_ = prod.Flush(ctx)
			close(f.firstHalf)
			select {
			case <-f.secondHalf:
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
	return first
}

func (f *franzLoad) finish(t *testing.T) {
	if err := <-f.prodDone; err != nil {
		t.Fatalf("franz-go producer through HAProxy: %v", err)
	}
	if err := <-f.consDone; err != nil {
		t.Fatalf("franz-go consumer through HAProxy: %v (read %d of %d)", err, f.count(), lbGoRecords)
	}
}

func (f *franzLoad) checkOnce(t *testing.T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, n := range f.seen {
		if n != 1 {
			t.Fatalf("franz-go consumer saw record %d %d times", i, n)
		}
	}
}

// javaLoad is the Java client's side: ConsoleConsumer reads the partition (no group) while
// ConsoleProducer writes it, half before the kill and half after.
type javaLoad struct {
	cons, prod            *exec.Cmd
	out, consErr, prodOut *syncbuf.Buffer
	in                    io.WriteCloser
	w                     *bufio.Writer
}

func startJavaLoad(ctx context.Context, t *testing.T, seed string) *javaLoad {
	j := &javaLoad{out: &syncbuf.Buffer{}, consErr: &syncbuf.Buffer{}, prodOut: &syncbuf.Buffer{}}
	var err error
	j.cons, err = kafkatest.ToolCommand(ctx, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", seed,
		"--topic", lbJavaTopic, "--partition", "0", "--offset", "earliest", "--max-messages", strconv.Itoa(lbJavaRecords), "--timeout-ms", "180000")
	if err != nil {
		t.Fatal(err)
	}
	j.cons.Stdout, j.cons.Stderr = j.out, j.consErr
	if err := j.cons.Start(); err != nil {
		t.Fatal(err)
	}
	j.prod, err = kafkatest.ToolCommand(ctx, "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", seed, "--topic", lbJavaTopic,
		"--producer-property", "enable.idempotence=true", "--producer-property", "acks=all")
	if err != nil {
		t.Fatal(err)
	}
	if j.in, err = j.prod.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	j.prod.Stdout, j.prod.Stderr = j.prodOut, j.prodOut
	if err := j.prod.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ConsoleProducer output:\n%s\nConsoleConsumer stderr:\n%s", j.prodOut, j.consErr)
		}
	})
	j.w = bufio.NewWriter(j.in)
	return j
}

// write gives ConsoleProducer the records j<from>..j<to-1>.
func (j *javaLoad) write(from, to int) {
	for i := from; i < to; i++ {
		fmt.Fprintf(j.w, "j%d\n", i)
	}
	_ = j.w.Flush()
}

func (j *javaLoad) finish(t *testing.T) {
	_ = j.in.Close()
	if err := j.prod.Wait(); err != nil {
		t.Fatalf("ConsoleProducer through HAProxy: %v\n%s", err, j.prodOut)
	}
	if err := j.cons.Wait(); err != nil {
		t.Fatalf("ConsoleConsumer through HAProxy: %v\n%s", err, j.consErr)
	}
}

func (j *javaLoad) checkOnce(t *testing.T) {
	lines := strings.Fields(j.out.String())
	slices.Sort(lines)
	want := make([]string, lbJavaRecords)
	for i := range want {
		want[i] = fmt.Sprintf("j%d", i)
	}
	slices.Sort(want)
	if !slices.Equal(lines, want) {
		t.Fatalf("ConsoleConsumer read %d lines, want j0..j%d once each\n%s", len(lines), lbJavaRecords-1, j.consErr)
	}
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
