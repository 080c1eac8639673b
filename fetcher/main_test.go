package fetcher

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives its tests: every
// Copier goroutine (sources, sinks, control, admin, events) stops with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
