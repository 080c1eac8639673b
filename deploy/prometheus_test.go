package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/freeport"
	"github.com/kmirror/kmirror/internal/polltest"
)

// prometheus is a real Prometheus server (Debian package prometheus) that
// scrapes one kmirror instance every second and evaluates rules.yml.
type prometheus struct {
	t    *testing.T
	base string // http://127.0.0.1:port
}

// startPrometheus runs Prometheus with a generated config in a temp dir
// until the test ends.
func startPrometheus(t *testing.T, bin, target string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs("prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	// The job is named kmirror, as rules.yml and docs/observability.md expect.
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: kmirror
    static_configs:
      - targets: [%q]
`, rules, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("prometheus log:\n%s", b)
			}
		}
	})
	p := &prometheus{t: t, base: "http://" + addr}
	polltest.Eventually(t, time.Minute, "Prometheus ready", func() (bool, string) {
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return p
}

// freeAddr picks a loopback port nobody listens on (Prometheus takes no :0).
func freeAddr(t *testing.T) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// api GETs /api/v1/<path> and decodes the data field into out.
func (p *prometheus) api(path string, params url.Values, out any) error {
	resp, err := http.Get(p.base + "/api/v1/" + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status, Error string
		Data          json.RawMessage
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("%s: %v: %s", path, err, b)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s %v: %s", path, params, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// series lists the label sets Prometheus holds for a metric.
func (p *prometheus) series(metric string) ([]map[string]string, error) {
	var out []map[string]string
	err := p.api("series", url.Values{"match[]": {metric}, "start": {fmt.Sprint(time.Now().Add(-10 * time.Minute).Unix())}}, &out)
	return out, err
}

// query evaluates an instant query and returns its result's label sets.
func (p *prometheus) query(expr string) ([]map[string]string, error) {
	var data struct {
		ResultType string
		Result     []struct{ Metric map[string]string }
	}
	if err := p.api("query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	var out []map[string]string
	for _, r := range data.Result {
		out = append(out, r.Metric)
	}
	return out, nil
}

// missingLabels says which of labels no series of the metric carries
// together; "" when one series carries them all.
func missingLabels(series []map[string]string, labels []string) string {
	best := labels
	for _, s := range series {
		var missing []string
		for _, l := range labels {
			if s[l] == "" {
				missing = append(missing, l)
			}
		}
		if len(missing) < len(best) {
			best = missing
		}
	}
	if len(best) == 0 {
		return ""
	}
	return strings.Join(best, ", ")
}
