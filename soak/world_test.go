package soak

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/faultnet"
	"github.com/kmirror/kmirror/internal/freeport"
	"github.com/kmirror/kmirror/internal/kafkatest"
)

// world is what the soak runs against: a source and a destination cluster of
// three brokers each (replication factor 3, min.insync.replicas 2), three
// kmirror processes in front of the destination, and a Toxiproxy proxy
// between kmirror and every source broker.
type world struct {
	src, dst *kafkatest.Cluster
	front    *faultnet.Front
	bin      string
	logDir   string
	inst     []*instance
	// srcAdm and dstAdm reach the clusters directly, for faults and checks.
	srcAdm, dstAdm *kadm.Client
	// busy is the instance a fault holds down (-1: none), which the CLI avoids.
	busyMu sync.Mutex
	busy   int
}

// clusterOpts are the brokers' settings: min.insync.replicas 2 so that an
// acknowledged record is on two brokers (one broker fault at a time loses
// nothing), a short log-cleaner backoff so the compacted topic compacts
// while it is mirrored.
func clusterOpts(extra ...kafkatest.Option) []kafkatest.Option {
	return append([]kafkatest.Option{kafkatest.Real(), kafkatest.Brokers(3),
		kafkatest.ServerProperty("min.insync.replicas", "2"),
		kafkatest.ServerProperty("log.cleaner.backoff.ms", "2000"),
		kafkatest.ServerProperty("unclean.leader.election.enable", "false")}, extra...)
}

func newWorld(t *testing.T, logDir string) *world {
	t.Helper()
	bin := instancetest.BinaryLater(t)
	front := faultnet.New(t, "FAULT", 3)
	w := &world{front: front, logDir: logDir, busy: -1}
	w.src = kafkatest.Start(t, clusterOpts(front.Listener())...)
	front.Connect(t, w.src)
	w.dst = kafkatest.Start(t, clusterOpts()...)
	w.srcAdm, w.dstAdm = kadm.NewClient(w.src.Client(t)), kadm.NewClient(w.dst.Client(t))
	w.bin = bin(t)
	for i := range 3 {
		p, err := newInstance(w.bin, fmt.Sprintf("kmirror-%d", i), w.dst.BootstrapString(), logDir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.kill)
		w.inst = append(w.inst, p)
	}
	return w
}

// instance is one kmirror process (`kmirror proxy`): a real process, so that
// SIGKILL and SIGSTOP are what an operator's machine does to it.
type instance struct {
	name, bin    string
	addr, mAddr  string
	args         []string
	logPath      string
	mu           sync.Mutex
	cmd          *exec.Cmd
	exited       chan struct{}
	expectedExit bool
	// unexpected counts exits the soak did not cause (a crash).
	unexpected int
}

func freeAddr() (string, error) { return freeport.Addr() }

func newInstance(bin, name, upstream, logDir string) (*instance, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	mAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p := &instance{name: name, bin: bin, addr: addr, mAddr: mAddr, logPath: filepath.Join(logDir, name+".log")}
	p.args = []string{"proxy", "--upstream", upstream, "--listen", addr, "--broker-ports", "0",
		"--metrics-addr", mAddr, "--state-partitions", "10", "--session-timeout", "6s", "--log-level", "info"}
	return p, p.start(context.Background())
}

// start runs the process and waits until it listens.
func (p *instance) start(ctx context.Context) error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== soak: start %s at %s\n", p.name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited, p.expectedExit = cmd, exited, false
	p.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		logf.Close()
		p.mu.Lock()
		if !p.expectedExit {
			p.unexpected++
		}
		p.mu.Unlock()
		close(exited)
	}()
	return p.waitListening(ctx, exited)
}

func (p *instance) waitListening(ctx context.Context, exited chan struct{}) error {
	deadline := time.Now().Add(60 * time.Second)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		select {
		case <-exited:
			return fmt.Errorf("%s exited at start (log %s)", p.name, p.logPath)
		default:
		}
		if c, err := net.Dial("tcp", p.addr); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s does not listen on %s after 60s", p.name, p.addr)
		}
		time.Sleep(wait)
	}
}

func (p *instance) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
			p.expectedExit = true
		}
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *instance) done() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// kill SIGKILLs the process and waits for it (also a frozen one).
func (p *instance) kill() {
	p.signal(syscall.SIGKILL)
	if d := p.done(); d != nil {
		<-d
	}
}

// stop asks the process to stop (SIGTERM) and waits for it, SIGKILL after 30s.
func (p *instance) stop() error {
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done():
		return nil
	case <-time.After(30 * time.Second):
		p.kill()
		return fmt.Errorf("%s did not stop on SIGTERM within 30s", p.name)
	}
}

func (p *instance) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *instance) crashes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unexpected
}

// procStatus reads VmRSS (KiB) and Threads of a live process from /proc.
func procStatus(pid int) (rssKiB, threads int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rssKiB, _ = strconv.ParseInt(f[1], 10, 64)
		case "Threads:":
			threads, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	return rssKiB, threads, nil
}

// proxyAddrs are the instances' client addresses: a bootstrap list for the
// mirror CLI and for the client that tries to write to mirror topics.
func (w *world) proxyAddrs() []string {
	out := make([]string, len(w.inst))
	for i, p := range w.inst {
		out[i] = p.addr
	}
	return out
}

// srcClient is a client of the source reaching it directly (not through the
// faults: the load and the checker are not what is under test).
func (w *world) srcClient(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	return w.src.Client(t, opts...)
}
