package proxybench

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/kafkatest"
)

// The relay path: the least any TCP proxy can do. A child process (this test binary again,
// with relayEnv set) accepts connections and copies bytes both ways between each one and the
// broker's RELAY listener, with no framing and no rewriting; the broker advertises the relay's
// own address to clients of that listener, so they stay on the relay. Each direction is one
// io.Copy between two *net.TCPConn, which the Go runtime turns into splice(2): the bytes never
// enter the relay's memory. Whatever the relay costs a client, the extra loopback TCP hop and a
// third process sharing the two cores cost any proxy; the proxy's figures against the relay's
// say what kmirror's own work costs on top.
const (
	relayEnv      = "KMIRROR_BENCH_RELAY_TARGET"
	relayListener = "RELAY"
)

func TestMain(m *testing.M) {
	if target := os.Getenv(relayEnv); target != "" {
		if err := relayMain(target); err != nil {
			fmt.Fprintln(os.Stderr, "relay:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// relayMain serves the listening socket inherited as fd 3 until the parent kills it.
func relayMain(target string) error {
	l, err := net.FileListener(os.NewFile(3, "relay-listener"))
	if err != nil {
		return fmt.Errorf("listener from fd 3: %w", err)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		go relayConn(c.(*net.TCPConn), target)
	}
}

func relayConn(client *net.TCPConn, target string) {
	defer client.Close()
	up, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay: dial:", err)
		return
	}
	upstream := up.(*net.TCPConn)
	defer upstream.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(upstream, client)
		_ = upstream.CloseWrite()
	}()
	_, _ = io.Copy(client, upstream)
	_ = client.CloseWrite()
	wg.Wait()
}

// relayListenerOption reserves the relay's address and returns the kafkatest option that
// makes the broker advertise it on the RELAY listener; startRelay serves it once the cluster
// runs. The socket is bound here and handed to the child, so no other process can take the
// port in between.
func relayListenerOption(b *testing.B) (*net.TCPListener, kafkatest.Option) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	return l.(*net.TCPListener), kafkatest.WithListener(relayListener, func(int) string { return addr })
}

// startRelay starts the relay child in front of the cluster's RELAY listener and returns its
// address and a reader of its CPU time.
func startRelay(b *testing.B, cluster *kafkatest.Cluster, l *net.TCPListener) (string, func() time.Duration) {
	b.Helper()
	f, err := l.File()
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // the child holds the socket through f
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), relayEnv+"="+cluster.Real().ListenerAddrs(relayListener)[0])
	cmd.ExtraFiles = []*os.File{f}
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start relay: %v", err)
	}
	_ = f.Close()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if b.Failed() {
			b.Logf("relay output:\n%s", logs.String())
		}
	})
	return addr, func() time.Duration { return processCPU(cmd.Process.Pid) }
}
