// Package metricsdoc keeps the docs' table of Prometheus metrics
// (docs/observability.md, "## Metrics") true:
// the tests of the packages that define series compare the table with
// what their registry describes (Check).
package metricsdoc

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adk2goose/goose-operator/internal/testing/doctext"
)

var (
	// row is a row of the metrics table:
	// | `name` | `label`, `label` (or none) | what |
	row = regexp.MustCompile("(?m)^\\| `([a-z0-9_:]+)` \\| ([^|]*) \\|")
	// label is a label the labels cell names.
	label = regexp.MustCompile("`([a-z0-9_]+)`")
	// desc reads a series' name and variable labels from Desc.String.
	desc = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
)

// Rows returns the metrics table in doc: each series it names, with the
// labels it gives it.
func Rows(doc string) map[string][]string {
	out := map[string][]string{}
	for _, m := range row.FindAllStringSubmatch(doc, -1) {
		var labels []string
		for _, l := range label.FindAllStringSubmatch(m[2], -1) {
			labels = append(labels, l[1])
		}
		slices.Sort(labels)
		out[m[1]] = labels
	}
	return out
}

// Described returns the series c describes, with their variable labels.
func Described(c prometheus.Collector) map[string][]string {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	out := map[string][]string{}
	for d := range ch {
		m := desc.FindStringSubmatch(d.String())
		if m == nil {
			continue
		}
		var labels []string
		for l := range strings.SplitSeq(m[2], ",") {
			if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		out[m[1]] = labels
	}
	return out
}

// Page and Section locate the metrics table.
const (
	Page    = "docs/observability.md"
	Section = "Metrics"
)

// Check fails t unless the metrics table has a row for each series c
// describes whose name starts with prefix, naming exactly its labels, and
// no row for a series of that prefix that c does not describe.
func Check(t testing.TB, prefix string, c prometheus.Collector) {
	t.Helper()
	rows := Rows(doctext.Section(t, Page, Section))
	n := 0
	described := Described(c)
	for name, labels := range described {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		n++
		documented, ok := rows[name]
		if !ok {
			t.Errorf("the metrics table has no row for %s (labels %v)", name, labels)
			continue
		}
		if !slices.Equal(documented, labels) {
			t.Errorf("the metrics table gives %s the labels %v, it has %v", name, documented, labels)
		}
		delete(rows, name)
	}
	if n == 0 {
		t.Fatalf("no series named %s* described", prefix)
	}
	for name := range rows {
		if strings.HasPrefix(name, prefix) {
			t.Errorf("the metrics table has a row for %s, which is not defined", name)
		}
	}
	checkMentions(t, prefix, described)
}

// histogramSuffixes are the series a histogram exports besides its name.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// checkMentions fails t for a series of prefix that a doc names anywhere
// (prose, queries, examples) and that is not described. A name ending in
// "_" is a prefix in prose ("goose_operator_agent_*"), not a series.
func checkMentions(t testing.TB, prefix string, described map[string][]string) {
	t.Helper()
	mention := regexp.MustCompile(regexp.QuoteMeta(prefix) + `[a-z0-9_]*`)
	for _, f := range doctext.Files(t) {
		for _, name := range mention.FindAllString(f.Text, -1) {
			if strings.HasSuffix(name, "_") || known(described, name) {
				continue
			}
			t.Errorf("%s names the series %s, which is not defined", f.Path, name)
		}
	}
}

// known reports whether name is a series of described, or one of the
// series a histogram of it exports.
func known(described map[string][]string, name string) bool {
	if _, ok := described[name]; ok {
		return true
	}
	for _, s := range histogramSuffixes {
		if base, ok := strings.CutSuffix(name, s); ok {
			if _, ok := described[base]; ok {
				return true
			}
		}
	}
	return false
}
