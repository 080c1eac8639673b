// Package metricstest reads an instance's Prometheus metrics in tests, the
// one GET every test that checks a metric needs.
package metricstest

import (
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Scrape returns the text exposition at http://addr/metrics. Callers decide
// whether an error is fatal or just "not yet" in a poll.
func Scrape(addr string) (string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("scrape %s: read: %w", addr, err)
	}
	return string(b), nil
}

// Grep keeps the lines of a scrape that contain substr: what a failing
// test prints instead of the whole page.
func Grep(body, substr string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
