package deploy_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPrometheusRules checks rules.yml with promtool and runs its unit
// tests (prometheus/rules_test.yml): each alert fires when it should and
// not before.
func TestPrometheusRules(t *testing.T) {
	promtool := tool(t, "promtool", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "rules.yml"},
		{"test", "rules", "rules_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s: %s", strings.Join(args, " "), strings.Join(strings.Fields(string(out)), " "))
	}
}
