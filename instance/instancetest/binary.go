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
	if bin := os.Getenv("KMIRROR_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "kmirror")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/kmirror/kmirror/cmd/kmirror").CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/kmirror: %v\n%s", err, out)
	}
	return bin
}
