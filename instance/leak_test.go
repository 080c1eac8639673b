package instance

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/kmirror/kmirror/internal/leaktest"
)

// TestMain fails the package's tests if any of them leaves a goroutine
// running. The proxy's gnet pool starts with the binary (leaktest.GnetPool).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.GnetPool()...)
}
