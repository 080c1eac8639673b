// Package metricstest reads an instance's Prometheus metrics in tests, the
// one GET every test that checks a metric needs.
package metricstest

import (
	"fmt"
	"io"
	"net/http"
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
