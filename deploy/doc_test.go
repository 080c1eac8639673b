// Package deploy_test checks what deploy/ ships: the Prometheus alert rules
// (promtool check and test rules) and, on a running kmirror on real Kafka
// scraped by real Prometheus, that every metric the rules and the Grafana
// dashboard query exists with the labels they use, and that the status page
// renders in a real browser (observability_test.go).
package deploy_test

import (
	"os/exec"
	"testing"

	"go.uber.org/goleak"

	"github.com/kmirror/kmirror/internal/leaktest"
)

// TestMain fails the package's tests if any of them leaves a goroutine
// running. The proxy's gnet pool starts with the binary (leaktest.GnetPool);
// kgo keeps zstd decoders for fetched batches (leaktest.ZstdDecoders).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.Join(leaktest.GnetPool(), leaktest.ZstdDecoders())...)
}

// tool finds a program of a Debian package make test needs
// (scripts/test-deps.sh installs it). A missing one fails the test, never
// skips it: a test that did not run with the real component proves nothing.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not installed: make test-deps (Debian package %s)", name, pkg)
	}
	return path
}
