package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// chromium runs headless Chromium (Debian package chromium) once: it loads
// url and either prints the DOM as rendered (--dump-dom) or writes a
// screenshot. Each run has a profile of its own and no background traffic.
func chromium(t *testing.T, bin, url string, mode ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir()}, mode...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	// Chromium forks helpers: a timeout kills the whole process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", mode, err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// pageRow is one partition row of the status page as Chromium rendered it.
type pageRow struct {
	state string
	lag   int64
}

var rowRE = regexp.MustCompile(`<tr class="partition [^"]*" data-topic="([^"]*)" data-partition="(\d+)" data-state="([^"]*)" data-lag="(-?\d+)"`)

// pageRows reads the partition rows of one mirror's section out of a DOM dump.
func pageRows(dom []byte) map[string]pageRow {
	out := map[string]pageRow{}
	for _, m := range rowRE.FindAllSubmatch(dom, -1) {
		lag, _ := strconv.ParseInt(string(m[4]), 10, 64)
		out[fmt.Sprintf("%s/%s", m[1], m[2])] = pageRow{state: string(m[3]), lag: lag}
	}
	return out
}

// artifact is where a test keeps a file for people to look at after it:
// bin/artifacts at the repository's root (make clean removes it).
func artifact(t *testing.T, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "bin", "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name)
}
