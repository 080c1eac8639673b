package mirrorbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// userHZ is the unit of utime/stime in /proc/<pid>/stat: USER_HZ, which the
// kernel fixes at 100 for userspace on every architecture Go runs on Linux.
const userHZ = 100

// cpuOf is the CPU time (user + system, all threads) process pid has used.
func cpuOf(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read cpu of pid %d: %w", pid, err)
	}
	_, cpu, ok := statCPU(string(b))
	if !ok {
		return 0, fmt.Errorf("pid %d: malformed stat %q", pid, b)
	}
	return cpu, nil
}

// statCPU reads the command name and utime + stime of a /proc stat line (of a
// process or a thread).
func statCPU(s string) (name string, cpu time.Duration, ok bool) {
	// The command name (field 2) may hold spaces and parentheses: count
	// fields from the last ')'.
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i {
		return "", 0, false
	}
	f := strings.Fields(s[j+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return "", 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, false
	}
	return s[i+1 : j], time.Duration(ut+st) * time.Second / userHZ, true
}

// threadKinds sorts a broker JVM's threads by name prefix.
var threadKinds = []struct{ name, prefix string }{
	{"requests", "data-plane-kafk"}, // request handlers and network threads
	{"JIT", "C2 Compiler"}, {"JIT", "C1 Compiler"},
	{"GC", "GC Thread"}, {"GC", "G1 "},
}

// threadKindNames are threadKinds' names, each once, and "other".
var threadKindNames = func() []string {
	var names []string
	for _, k := range threadKinds {
		if !slices.Contains(names, k.name) {
			names = append(names, k.name)
		}
	}
	return append(names, "other")
}()

// threadsCPU is the CPU time of the processes' threads by kind (threadKinds),
// the rest under "other".
func threadsCPU(pids []int) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, pid := range pids {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
		for _, task := range tasks {
			b, err := os.ReadFile(filepath.Join(task, "stat"))
			if err != nil {
				continue // the thread exited
			}
			name, cpu, ok := statCPU(string(b))
			if !ok {
				continue
			}
			kind := "other"
			for _, k := range threadKinds {
				if strings.HasPrefix(name, k.prefix) {
					kind = k.name
					break
				}
			}
			out[kind] += cpu
		}
	}
	return out
}

// peakRSS is VmHWM, the process's peak resident set, in bytes.
func peakRSS(pid int) (int64, error) { return statusBytes(pid, "VmHWM") }

// statusBytes is a kB field of /proc/<pid>/status (VmHWM, VmRSS), in bytes.
func statusBytes(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("pid %d: %s %q: %w", pid, field, rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("pid %d: no %s in status", pid, field)
}

// The raw-produce path runs in a child process (this test binary again, with
// rawEnv set) so that its CPU and peak RSS are its own, as the kmirror and
// MirrorMaker 2 processes' are, and not those of the benchmark's pollers.
const (
	rawEnv        = "KMIRROR_BENCH_RAW_PRODUCER"
	rawBootstrap  = "KMIRROR_BENCH_RAW_BOOTSTRAP"
	rawTopic      = "KMIRROR_BENCH_RAW_TOPIC"
	rawPartitions = "KMIRROR_BENCH_RAW_PARTITIONS"
	rawCodec      = "KMIRROR_BENCH_RAW_CODEC"
)

func TestMain(m *testing.M) {
	if os.Getenv(rawEnv) != "" {
		if err := rawProducerMain(); err != nil {
			fmt.Fprintln(os.Stderr, "raw producer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// rawProducerMain is the child: build the records, say "ready", wait for a
// line on stdin, produce everything, say "done <nanoseconds>", and exit when
// stdin closes (so the parent can read /proc first).
func rawProducerMain() error {
	parts, err := strconv.Atoi(os.Getenv(rawPartitions))
	if err != nil {
		return fmt.Errorf("%s: %w", rawPartitions, err)
	}
	c, ok := codecByName[os.Getenv(rawCodec)]
	if !ok {
		return fmt.Errorf("%s: unknown codec %q", rawCodec, os.Getenv(rawCodec))
	}
	topic := os.Getenv(rawTopic)
	recs := records(topic, int32(parts))
	cl, err := kgo.NewClient(append(producerOpts(c.codec), kgo.SeedBrokers(strings.Split(os.Getenv(rawBootstrap), ",")...))...)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Connect and learn the leaders before the clock starts.
	md := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	md.Topics = append(md.Topics, mt)
	if _, err := md.RequestWith(ctx, cl); err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	in := bufio.NewReader(os.Stdin)
	fmt.Println("ready")
	if _, err := in.ReadString('\n'); err != nil {
		return fmt.Errorf("wait for go: %w", err)
	}
	began := time.Now()
	if err := produceAll(ctx, cl, recs); err != nil {
		return err
	}
	fmt.Printf("done %d\n", time.Since(began).Nanoseconds())
	_, _ = in.ReadString('\n') // EOF when the parent is done with /proc
	return nil
}

// rawChild is a started raw producer child.
type rawChild struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     *bufio.Reader
	exited  chan struct{} // closed when the child has exited; then waitErr is set
	waitErr error
}

func startRawChild(b *testing.B, bootstrap, topic string, parts int32, c codec) *rawChild {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), rawEnv+"=1", rawBootstrap+"="+bootstrap, rawTopic+"="+topic,
		rawPartitions+"="+strconv.Itoa(int(parts)), rawCodec+"="+c.name,
		// The parent's record count, which a benchmark may have set (the WAN's full
		// mode): the child would read only the environment's.
		"KMIRROR_BENCH_RECORDS="+strconv.FormatInt(totalRecords, 10))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start raw producer: %v", err)
	}
	rc := &rawChild{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), exited: make(chan struct{})}
	go func() {
		// Wait closes stdout once the child has exited. The child exits only
		// after stdin closes, which is after its last line was read; a child
		// that dies early fails the reads, as it should.
		rc.waitErr = cmd.Wait()
		close(rc.exited)
	}()
	b.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		<-rc.exited
	})
	return rc
}

// finish lets the child exit (it waits for stdin to close) and reports how.
func (rc *rawChild) finish() error {
	_ = rc.stdin.Close()
	<-rc.exited
	if rc.waitErr != nil {
		return fmt.Errorf("raw producer: %w", rc.waitErr)
	}
	return nil
}

// expect reads the child's next line, which must start with word.
func (rc *rawChild) expect(word string) (string, error) {
	line, err := rc.out.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("raw producer exited before %q: %w", word, err)
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), word)
	if !ok {
		return "", fmt.Errorf("raw producer said %q, want %q", line, word)
	}
	return strings.TrimSpace(rest), nil
}

// warmFreePages touches n bytes of fresh memory and gives it back, so that the
// next n bytes the kernel hands out (the destination broker's page cache, the
// copier's buffers) are pages the host backs.
//
// Why: this machine is a VM whose kernel reports free pages to its host
// ("Free page reporting enabled" at boot; /sys/module/page_reporting), which
// takes them back. A write into a page handed back costs a host fault on
// first touch: `dd` into a fresh file ran at 6.4 GB/s into recently freed
// pages and at 0.6-0.7 GB/s into reported ones, all of it system time. In a
// copy, that cost lands on the destination broker's request threads
// (copy_folio_from_iter_atomic was 40-65 % of their perf samples in the slow
// copies and 0-3 % in the fast ones) and decided which build looked faster in
// issue 16's paired rounds. Which copy met reported pages depended on when
// other frees pushed the kernel's pool past its reporting threshold, not on
// the build. Warming the pool before every path gives each the same start.
func warmFreePages(n int64) {
	if n <= 0 {
		return
	}
	const limit = 2 << 30 // never more than this, whatever the copy's size
	n = min(n, limit)
	mem, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return // best effort: an unwarmed pool only slows the path down
	}
	page := os.Getpagesize()
	for i := 0; i < len(mem); i += page {
		mem[i] = 1
	}
	_ = syscall.Munmap(mem)
}
