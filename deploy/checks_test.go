package deploy_test

import (
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/polltest"
)

// metricsExist checks, through Prometheus's API, that every metric a rule,
// panel or variable reads has a series carrying every label the query uses.
// Some series appear a little later than others (the recovery point is
// sampled every 10 s, sync jobs every second), hence the poll.
func metricsExist(t *testing.T, prom *prometheus, qs []query) {
	checked := map[string]bool{}
	polltest.Eventually(t, wait, "every metric the rules and the dashboard use, with their labels", func() (bool, string) {
		var bad []string
		for _, q := range qs {
			for _, m := range q.metrics() {
				series, err := prom.series(m)
				if err != nil {
					return false, err.Error()
				}
				if len(series) == 0 {
					bad = append(bad, fmt.Sprintf("%s: no series of %s", q.where, m))
				} else if miss := missingLabels(series, q.labels); miss != "" {
					bad = append(bad, fmt.Sprintf("%s: no series of %s has label(s) %s (series: %v)", q.where, m, miss, series))
				}
				checked[m] = true
			}
		}
		return len(bad) == 0, strings.Join(bad, "\n")
	})
	names := make([]string, 0, len(checked))
	for m := range checked {
		names = append(names, m)
	}
	slices.Sort(names)
	t.Logf("%d queries, %d metrics, each with the labels its queries use: %s", len(qs), len(names), strings.Join(names, " "))
}

// panelsReturnData runs each panel's query ($__rate_interval as 1m, every
// mirror) and wants at least one series back.
func panelsReturnData(t *testing.T, prom *prometheus, qs []query) {
	polltest.Eventually(t, wait, "every dashboard panel's query returns data", func() (bool, string) {
		var empty []string
		for _, q := range qs {
			if !q.panel {
				continue
			}
			res, err := prom.query(q.run)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", q.where, err)
			}
			if len(res) == 0 {
				empty = append(empty, fmt.Sprintf("%s: %s returns nothing", q.where, q.run))
			}
		}
		return len(empty) == 0, strings.Join(empty, "\n")
	})
	n := 0
	for _, q := range qs {
		if q.panel {
			n++
		}
	}
	t.Logf("all %d panel queries return data", n)
}

// rulesEvaluate wants every rule of rules.yml loaded and evaluating without
// error, and the FAILED partition's alert pending or firing for the mirror.
func rulesEvaluate(t *testing.T, prom *prometheus) {
	polltest.Eventually(t, wait, "every rule evaluated without error", func() (bool, string) {
		var data struct {
			Groups []struct {
				Rules []struct{ Name, Health, LastError string }
			}
		}
		if err := prom.api("rules", url.Values{}, &data); err != nil {
			return false, err.Error()
		}
		var n int
		var bad []string
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health != "ok" {
					bad = append(bad, fmt.Sprintf("%s: %s %s", r.Name, r.Health, r.LastError))
				}
			}
		}
		want := len(ruleQueries(t))
		return n == want && len(bad) == 0, fmt.Sprintf("%d of %d rules loaded; unhealthy: %v", n, want, bad)
	})
	var state string
	polltest.Eventually(t, wait, "KmirrorPartitionFailed for mirror "+obsMirror, func() (bool, string) {
		var data struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
		if err := prom.api("alerts", url.Values{}, &data); err != nil {
			return false, err.Error()
		}
		for _, a := range data.Alerts {
			if a.Labels["alertname"] == "KmirrorPartitionFailed" && a.Labels["mirror"] == obsMirror {
				state = a.State
				return true, ""
			}
		}
		return false, fmt.Sprintf("alerts: %+v", data.Alerts)
	})
	t.Logf("KmirrorPartitionFailed{mirror=%q} is %s (for: 2m before it fires)", obsMirror, state)
}

// statusPage loads the page in Chromium: the FAILED partition is shown as
// FAILED, every partition's state and lag are what describe says, and a
// screenshot is kept.
func (e *obsEnv) statusPage(t *testing.T, bin string) {
	url := "http://" + e.in.Proxy.MetricsAddr() + "/"
	var dom []byte
	polltest.Eventually(t, wait, "the page shows what describe shows", func() (bool, string) {
		want := e.describe(t)
		dom = chromium(t, bin, url, "--dump-dom")
		got := pageRows(dom)
		if len(got) != len(want) {
			return false, fmt.Sprintf("page rows %v, describe %v", got, want)
		}
		for k, w := range want {
			if got[k] != w {
				return false, fmt.Sprintf("%s: page %+v, describe %+v", k, got[k], w)
			}
		}
		return true, ""
	})
	rows := pageRows(dom)
	if rows[doomed+"/0"].state != "FAILED" || rows[paused+"/0"].lag != pausedLag {
		t.Fatalf("page rows %v: want %s/0 FAILED and %s/0 %d behind", rows, doomed, paused, pausedLag)
	}
	for _, want := range []string{`class="partition state-FAILED"`, `id="failed-count">1<`, `this instance`, `id="chart-throughput"`, `id="chart-lag"`} {
		if !strings.Contains(string(dom), want) {
			t.Errorf("the rendered page lacks %s", want)
		}
	}
	shot := artifact(t, "statuspage.png")
	_ = os.Remove(shot)
	chromium(t, bin, url, "--screenshot="+shot, "--window-size=1280,1400", "--hide-scrollbars")
	if st, err := os.Stat(shot); err != nil || st.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v (%v)", shot, st, err)
	}
	t.Logf("Chromium: %d partition rows matching describe (%v); screenshot %s (%s)", len(rows), rows, shot, time.Now().UTC().Format(time.RFC3339))
}
