package instancetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Binary is the kmirror binary for tests and benchmarks that run kmirror as a process of its
// own: $KMIRROR_BIN when set (`make bench` passes the bin/kmirror it built, the binary that
// ships and one a profiler can read symbols from afterwards), else a fresh build of
// cmd/kmirror in the test's temporary directory.
func Binary(t testing.TB) string {
	t.Helper()
	return BinaryLater(t)(t)
}

// BinaryLater starts Binary's build in the background, so that it overlaps a test's slow
// setup (cluster starts), and returns what waits for it. The build never outlives t.
func BinaryLater(t testing.TB) func(testing.TB) string {
	if bin := os.Getenv("KMIRROR_BIN"); bin != "" {
		return func(testing.TB) string { return bin }
	}
	return build(t, "kmirror")
}

// BinaryWithTestHooksLater is BinaryLater for a binary built with the build tag
// kmirror_testhooks (never $KMIRROR_BIN, which is the release build): its test hooks are
// driven by environment variables (instance/routedrive_pause.go).
func BinaryWithTestHooksLater(t testing.TB) func(testing.TB) string {
	return build(t, "kmirror-testhooks", "-tags", "kmirror_testhooks")
}

// build starts `go build` of cmd/kmirror into the test's temporary directory.
func build(t testing.TB, name string, flags ...string) func(testing.TB) string {
	bin := filepath.Join(t.TempDir(), name)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		defer close(done)
		args := append(append([]string{"build"}, flags...), "-o", bin, "github.com/kmirror/kmirror/cmd/kmirror")
		out, err = exec.Command("go", args...).CombinedOutput()
	}()
	t.Cleanup(func() { <-done })
	return func(t testing.TB) string {
		t.Helper()
		<-done
		if err != nil {
			t.Fatalf("go build cmd/kmirror: %v\n%s", err, out)
		}
		return bin
	}
}
