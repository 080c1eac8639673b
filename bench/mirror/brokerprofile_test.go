package mirrorbench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The destination broker's own profile of each kmirror copy and raw produce:
// which broker code a build's copy (or the producer) makes the broker run, beside the thread CPU the -v
// table gives. Both are off by default (a recording costs the broker CPU of
// its own) and write one file per copy and broker into the directory given:
//   - KMIRROR_BENCH_JFR: a Java Flight Recording (settings=profile). It
//     samples Java frames only, so time in system calls does not show.
//   - KMIRROR_BENCH_PERF: `perf record -g` of the broker processes, kernel
//     included (`perf report --sort comm,sym` reads it).
var (
	jfrDir  = os.Getenv("KMIRROR_BENCH_JFR")
	perfDir = os.Getenv("KMIRROR_BENCH_PERF")
)

// brokerRecording is a profile running in every destination broker.
type brokerRecording struct {
	pids []int
	name string
	perf *exec.Cmd
}

// startBrokerRecording starts the profiles asked for, named after the path
// and topic, or returns nil when none is.
func startBrokerRecording(b *testing.B, e *env, path, topic string) *brokerRecording {
	if (jfrDir == "" && perfDir == "") || e.dst.Real() == nil {
		return nil
	}
	r := &brokerRecording{pids: e.dst.Real().PIDs(), name: path + "-" + topic}
	if jfrDir != "" {
		for i, pid := range r.pids {
			file := filepath.Join(jfrDir, fmt.Sprintf("%s-b%d.jfr", r.name, i))
			if out, err := exec.Command("jcmd", strconv.Itoa(pid), "JFR.start", "name="+r.name, "settings=profile", "filename="+file).CombinedOutput(); err != nil {
				b.Fatalf("jcmd JFR.start on broker %d: %v: %s", pid, err, out)
			}
		}
	}
	if perfDir != "" {
		pids := make([]string, len(r.pids))
		for i, pid := range r.pids {
			pids[i] = strconv.Itoa(pid)
		}
		r.perf = exec.Command("perf", "record", "-q", "-g", "-F", "499", "-p", strings.Join(pids, ","), "-o", filepath.Join(perfDir, r.name+".perf"))
		if err := r.perf.Start(); err != nil {
			b.Fatalf("perf record: %v", err)
		}
	}
	return r
}

// stop ends the profiles, which writes their files.
func (r *brokerRecording) stop(b *testing.B) {
	if r == nil {
		return
	}
	if jfrDir != "" {
		for _, pid := range r.pids {
			if out, err := exec.Command("jcmd", strconv.Itoa(pid), "JFR.stop", "name="+r.name).CombinedOutput(); err != nil {
				b.Errorf("jcmd JFR.stop on broker %d: %v: %s", pid, err, out)
			}
		}
	}
	if r.perf != nil {
		_ = r.perf.Process.Signal(syscall.SIGINT)
		// perf writes its file on SIGINT and may report that signal as its exit.
		if err := r.perf.Wait(); err != nil && !stoppedBy(err, syscall.SIGINT) {
			b.Errorf("perf record: %v", err)
		}
	}
}

// stoppedBy reports whether err is a process's exit by signal sig.
func stoppedBy(err error, sig syscall.Signal) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}
