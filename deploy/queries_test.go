package deploy_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// query is one PromQL expression that rules.yml or the dashboard ships, with
// the labels it relies on: its selectors' and groupings' labels and those its
// alert annotations or legend print.
type query struct {
	where  string // "rule KmirrorLagHigh", "panel Lag (records)"
	expr   string // as shipped
	run    string // runnable: Grafana's variables replaced
	labels []string
	panel  bool // a dashboard panel: must return data
}

var (
	metricName = regexp.MustCompile(`\b(kmirror_[a-zA-Z0-9_]+|up)\b`)
	grouping   = regexp.MustCompile(`\b(?:by|without|on|ignoring)\s*\(([^)]*)\)`)
	selector   = regexp.MustCompile(`\{([^}]*)\}`)
	matcher    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	printed    = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)|\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	labelVals  = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)
)

// metrics names the metrics an expression reads (kmirror's own and up).
func (q query) metrics() []string {
	var out []string
	for _, m := range metricName.FindAllString(q.expr, -1) {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// usedLabels collects the labels an expression groups or matches by, and
// those the text around it prints.
func usedLabels(expr string, around ...string) []string {
	var out []string
	add := func(l string) {
		if l != "" && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			add(strings.TrimSpace(l))
		}
	}
	for _, s := range selector.FindAllStringSubmatch(expr, -1) {
		for _, m := range matcher.FindAllStringSubmatch(s[1], -1) {
			add(m[1])
		}
	}
	for _, text := range around {
		for _, p := range printed.FindAllStringSubmatch(text, -1) {
			add(p[1] + p[2])
		}
	}
	return out
}

// ruleQueries reads prometheus/rules.yml.
func ruleQueries(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile("prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
				Annotations         map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("rules.yml: %v", err)
	}
	var out []query
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			var around []string
			for _, a := range r.Annotations {
				around = append(around, a)
			}
			out = append(out, query{where: "rule " + r.Alert + r.Record, expr: r.Expr, run: r.Expr, labels: usedLabels(r.Expr, around...)})
		}
	}
	return out
}

// dashboardQueries reads grafana/kmirror.json: every panel's targets and the
// template variables' label_values queries.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile("grafana/kmirror.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr, LegendFormat string }
		}
		Templating struct {
			List []struct {
				Name       string
				Definition string
			}
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("kmirror.json: %v", err)
	}
	grafana := strings.NewReplacer("$__rate_interval", "1m", "$mirror", ".*")
	var out []query
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, query{where: "panel " + p.Title, expr: tg.Expr, run: grafana.Replace(tg.Expr),
				labels: usedLabels(tg.Expr, tg.LegendFormat), panel: true})
		}
	}
	for _, v := range d.Templating.List {
		m := labelVals.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Fatalf("dashboard variable %s: %q is not label_values(metric, label)", v.Name, v.Definition)
		}
		out = append(out, query{where: "variable " + v.Name, expr: m[1], run: m[1], labels: []string{m[2]}})
	}
	return out
}

// TestShippedQueriesParse checks the parsing the real Prometheus test relies
// on, without Kafka: every rule and panel names at least one metric, and the
// labels are found where they are used.
func TestShippedQueriesParse(t *testing.T) {
	qs := append(ruleQueries(t), dashboardQueries(t)...)
	if len(qs) < 20 {
		t.Fatalf("%d queries found in rules.yml and kmirror.json", len(qs))
	}
	for _, q := range qs {
		if len(q.metrics()) == 0 {
			t.Errorf("%s: no metric found in %q", q.where, q.expr)
		}
	}
	got := usedLabels(`histogram_quantile(0.99, sum by (le, api) (rate(x{mirror=~"$m", state="FAILED"}[1m])))`, `{{ $labels.instance }} {{reason}}`)
	if want := []string{"le", "api", "mirror", "state", "instance", "reason"}; !slices.Equal(got, want) {
		t.Fatalf("usedLabels = %v, want %v", got, want)
	}
}
