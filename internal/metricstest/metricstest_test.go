package metricstest

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "up 1")
	}))
	defer srv.Close()
	body, err := Scrape(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil || body != "up 1\n" {
		t.Fatalf("Scrape = %q, %v", body, err)
	}

	// Nobody listening: an error, not an empty body.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if _, err := Scrape(addr); err == nil {
		t.Fatal("Scrape of a closed port succeeded")
	}
}
