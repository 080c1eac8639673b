package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func getStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	cl := &http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestHealthEndpoints(t *testing.T) {
	c := startKfake(t, 1)
	p := startProxy(t, c.ListenAddrs(), func(cfg *Config) { cfg.MetricsAddr = "127.0.0.1:0" })
	base := "http://" + p.MetricsAddr()

	if code, body := getStatus(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body := getStatus(t, base+"/ready"); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("/ready without a readiness check: %d %q, want 200", code, body)
	}
	p.SetReadiness(func(context.Context) error { return errors.New("not yet a member of the coordinator group g") })
	code, body := getStatus(t, base+"/ready")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not yet a member of the coordinator group g") {
		t.Fatalf("/ready with a failing check: %d %q, want 503 with the reason", code, body)
	}
	p.SetReadiness(func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("the check got no deadline")
		}
		return nil
	})
	if code, body := getStatus(t, base+"/ready"); code != http.StatusOK {
		t.Fatalf("/ready with a passing check: %d %q", code, body)
	}
	p.draining.Store(true) // what Shutdown sets first: balancers stop sending before listeners close
	if code, body := getStatus(t, base+"/ready"); code != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Fatalf("/ready while draining: %d %q", code, body)
	}
	p.draining.Store(false)
}
