package compat

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any of them leaves a goroutine running (the kfake
// clusters and clients of cache_test.go).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
