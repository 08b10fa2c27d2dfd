// Package monitoring checks the Helm chart's Grafana dashboard and Prometheus
// rules: every query parses with Prometheus's own PromQL parser, the rule
// file loads with Prometheus's rulefmt, and every series they read is one the
// project exports (the metrics table of docs/observability.md, which the main
// module's tests keep equal to the registries) or one of the few
// kube-state-metrics series named below.
package monitoring

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

var (
	root          = filepath.Join("..", "..")
	dashboardPath = filepath.Join(root, "charts", "goose-operator", "files", "grafana-dashboard.json")
	rulesPath     = filepath.Join(root, "charts", "goose-operator", "files", "prometheus-rules.yaml")
	metricsDoc    = filepath.Join(root, "docs", "observability.md")

	// metricRow is a row of the metrics table: | `name` | `label`, ... | what |
	metricRow = regexp.MustCompile("(?m)^\\| `([a-z0-9_:]+)` \\| ([^|]*) \\|")
	// labelName is a label its labels cell names.
	labelName = regexp.MustCompile("`([a-z0-9_]+)`")
	// grafanaVar is a Grafana variable in a query: $name or ${name:format}.
	grafanaVar = regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}?`)
	// labelValues is Grafana's label_values(selector, label) variable query.
	labelValues = regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)
)

// kubeStateMetrics are the series of kube-state-metrics the dashboard and
// the alerts read, for what the project does not export itself: container
// restarts and readiness. Only these are allowed besides the project's.
var kubeStateMetrics = []string{
	"kube_pod_container_status_restarts_total",
	"kube_pod_init_container_status_ready",
}

// targetLabels are the labels a scrape adds to every series (the sidecar's
// are scraped per pod, see docs/observability.md).
var targetLabels = []string{"namespace", "pod", "container", "job", "instance"}

// histogramSuffixes are the series a histogram exports besides its name.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// exported reads the metrics table: each series with the labels it has.
func exported(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, m := range metricRow.FindAllStringSubmatch(string(b), -1) {
		if !strings.HasPrefix(m[1], "adk2goose_") && !strings.HasPrefix(m[1], "goose_operator_") {
			continue
		}
		var labels []string
		for _, l := range labelName.FindAllStringSubmatch(m[2], -1) {
			labels = append(labels, l[1])
		}
		out[m[1]] = labels
	}
	if len(out) < 15 {
		t.Fatalf("only %d series in the metrics table of %s", len(out), metricsDoc)
	}
	return out
}

// labelsOf returns the labels a selector of name may match on, and whether
// name is a series the project exports or the dashboard may read.
func labelsOf(series map[string][]string, name string) (labels []string, ok bool) {
	if slices.Contains(kubeStateMetrics, name) {
		return nil, true // any of kube-state-metrics' labels
	}
	if l, ok := series[name]; ok {
		return append(slices.Clone(l), targetLabels...), true
	}
	for _, s := range histogramSuffixes {
		if base, cut := strings.CutSuffix(name, s); cut {
			if l, ok := series[base]; ok {
				l = append(slices.Clone(l), targetLabels...)
				if s == "_bucket" {
					l = append(l, "le")
				}
				return l, true
			}
		}
	}
	return nil, false
}

var promql = parser.NewParser(parser.Options{})

// checkQuery parses q and fails t for a selector of a series that is not
// exported, or a matcher on a label that series does not have. It returns
// the series the query reads.
func checkQuery(t *testing.T, where, q string, series map[string][]string) []string {
	t.Helper()
	expr, err := promql.ParseExpr(q)
	if err != nil {
		t.Errorf("%s: the query does not parse: %v\n%s", where, err, q)
		return nil
	}
	var read []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			t.Errorf("%s: a selector without a metric name: %s", where, vs)
			return nil
		}
		read = append(read, name)
		allowed, ok := labelsOf(series, name)
		if !ok {
			t.Errorf("%s: %s is no series the project exports", where, name)
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel || allowed == nil {
				continue
			}
			if !slices.Contains(allowed, m.Name) {
				t.Errorf("%s: %s has no label %q (it has %v)", where, name, m.Name, allowed)
			}
		}
		return nil
	})
	return read
}

// grafanaExample is what a Grafana variable stands for while a query is
// parsed: a value of the same shape as Grafana would interpolate.
func grafanaExample(name string) string {
	switch name {
	case "__rate_interval", "__interval", "__range":
		return "5m"
	default:
		return "example"
	}
}

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// TestDashboardQueries: every panel's queries and every variable's
// label_values query parse and read only exported series.
func TestDashboardQueries(t *testing.T) {
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	series := exported(t)
	interpolate := func(q string) string {
		return grafanaVar.ReplaceAllStringFunc(q, func(v string) string {
			return grafanaExample(grafanaVar.FindStringSubmatch(v)[1])
		})
	}
	queries := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			if len(checkQuery(t, "panel "+p.Title, interpolate(tg.Expr), series)) == 0 {
				t.Errorf("panel %q: a query reads no series: %s", p.Title, tg.Expr)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)["query"].(string)
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, q)
			continue
		}
		queries++
		checkQuery(t, "variable "+v.Name, interpolate(m[1]), series)
	}
	if len(d.Panels) < 8 || queries < 10 {
		t.Errorf("only %d panels and %d queries", len(d.Panels), queries)
	}
}

// TestRules: the rule file loads with Prometheus's rulefmt (which parses
// each expression and its templates), every alert has a summary, and every
// expression reads only exported series.
func TestRules(t *testing.T) {
	groups, errs := rulefmt.ParseFile(rulesPath, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("rulefmt: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	series := exported(t)
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if r.Annotations["summary"] == "" {
				t.Errorf("alert %s has no summary", r.Alert)
			}
			checkQuery(t, "alert "+r.Alert, r.Expr, series)
		}
	}
	if alerts < 4 {
		t.Errorf("only %d alerts", alerts)
	}
}
