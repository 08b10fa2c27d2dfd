// Command render draws the Grafana dashboard's panels from recorded scrapes
// of the project's metrics (hack/dashboardshot): it loads every scrape into
// a Prometheus TSDB with the target labels a PodMonitor would add, runs each
// panel's queries with Prometheus's own engine over the recording, and plots
// the panels that have data into one PNG. Grafana itself cannot run where
// the picture is made; the queries and the data are the real ones.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/tsdb"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The recorded sidecar is the only pod of agent "demo" in namespace "demo".
const (
	namespace = "demo"
	agent     = "demo"
	pod       = "demo-0"
)

// units are the axis labels of Grafana's units.
var units = map[string]string{"ops": "per second", "reqps": "requests per second", "s": "seconds", "percentunit": "fraction of the budget"}

var grafanaVar = regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}?`)

func main() {
	scrapes := flag.String("scrapes", "", "directory of scrapes written by hack/dashboardshot (required)")
	dashboard := flag.String("dashboard", "../../charts/goose-operator/files/grafana-dashboard.json", "the dashboard")
	out := flag.String("out", "dashboard.png", "the picture")
	flag.Parse()
	if err := run(*scrapes, *dashboard, *out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

func run(scrapes, dashboardPath, out string) error {
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		return fmt.Errorf("failed to read the dashboard: %w", err)
	}
	var d struct{ Panels []dashboardPanel }
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("failed to parse the dashboard: %w", err)
	}
	dir, err := os.MkdirTemp("", "dashboard-tsdb-")
	if err != nil {
		return fmt.Errorf("failed to create the TSDB directory: %w", err)
	}
	defer os.RemoveAll(dir)
	db, err := tsdb.Open(dir, slog.New(slog.DiscardHandler), nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		return fmt.Errorf("failed to open the TSDB: %w", err)
	}
	defer db.Close()
	start, end, interval, err := load(db, scrapes)
	if err != nil {
		return err
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	rateInterval := max(4*interval, 30*time.Second)
	var plots []*plot.Plot
	var empty []string
	for _, p := range d.Panels {
		pl, n, err := panelPlot(engine, db, p, start, end, interval, rateInterval)
		if err != nil {
			return err
		}
		if n == 0 {
			empty = append(empty, p.Title)
			continue
		}
		plots = append(plots, pl)
	}
	fmt.Printf("%d panels drawn from %s to %s; without data in this recording: %s\n",
		len(plots), start.Format(time.TimeOnly), end.Format(time.TimeOnly), strings.Join(empty, ", "))
	return drawGrid(plots, out)
}

// load appends every scrape to db with the target labels and returns the
// time range and the scrape interval.
func load(db *tsdb.DB, scrapes string) (start, end time.Time, interval time.Duration, err error) {
	files, err := filepath.Glob(filepath.Join(scrapes, "*.prom"))
	if err != nil || len(files) < 3 {
		return start, end, 0, fmt.Errorf("want at least 3 scrapes in %s, found %d (%v)", scrapes, len(files), err)
	}
	slices.Sort(files)
	app := db.Appender(context.Background())
	var times []int64
	for _, f := range files {
		ts, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(f), ".prom"), 10, 64)
		if err != nil {
			return start, end, 0, fmt.Errorf("failed to read the time of %s: %w", f, err)
		}
		times = append(times, ts)
		r, err := os.Open(f)
		if err != nil {
			return start, end, 0, fmt.Errorf("failed to open %s: %w", f, err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(r)
		_ = r.Close()
		if err != nil {
			return start, end, 0, fmt.Errorf("failed to parse %s: %w", f, err)
		}
		for name, mf := range families {
			for _, m := range mf.GetMetric() {
				for _, s := range samples(name, mf.GetType(), m) {
					if _, err := app.Append(0, s.labels, ts, s.value); err != nil {
						return start, end, 0, fmt.Errorf("failed to append %s: %w", s.labels, err)
					}
				}
			}
		}
	}
	if err := app.Commit(); err != nil {
		return start, end, 0, fmt.Errorf("failed to commit the scrapes: %w", err)
	}
	start, end = time.UnixMilli(times[0]), time.UnixMilli(times[len(times)-1])
	return start, end, end.Sub(start) / time.Duration(len(times)-1), nil
}

type sample struct {
	labels labels.Labels
	value  float64
}

// samples are the series one metric of a family exposes, as Prometheus
// stores them (a histogram as its _bucket, _sum and _count).
func samples(name string, typ dto.MetricType, m *dto.Metric) []sample {
	base := map[string]string{"namespace": namespace, "pod": pod, "job": "adk2goose"}
	for _, l := range m.GetLabel() {
		base[l.GetName()] = l.GetValue()
	}
	series := func(name string, extra map[string]string, v float64) sample {
		ls := map[string]string{"__name__": name}
		for k, v := range base {
			ls[k] = v
		}
		for k, v := range extra {
			ls[k] = v
		}
		return sample{labels.FromMap(ls), v}
	}
	switch typ {
	case dto.MetricType_COUNTER:
		return []sample{series(name, nil, m.GetCounter().GetValue())}
	case dto.MetricType_GAUGE:
		return []sample{series(name, nil, m.GetGauge().GetValue())}
	case dto.MetricType_UNTYPED:
		return []sample{series(name, nil, m.GetUntyped().GetValue())}
	case dto.MetricType_HISTOGRAM:
		h := m.GetHistogram()
		out := []sample{
			series(name+"_sum", nil, h.GetSampleSum()),
			series(name+"_count", nil, float64(h.GetSampleCount())),
			series(name+"_bucket", map[string]string{"le": "+Inf"}, float64(h.GetSampleCount())),
		}
		for _, b := range h.GetBucket() {
			out = append(out, series(name+"_bucket", map[string]string{"le": strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)}, float64(b.GetCumulativeCount())))
		}
		return out
	}
	return nil
}

// panelPlot runs a panel's queries over the recording and plots their
// series; n counts the series with data.
func panelPlot(engine *promql.Engine, db *tsdb.DB, p dashboardPanel, start, end time.Time, step, rateInterval time.Duration) (*plot.Plot, int, error) {
	pl := plot.New()
	pl.Title.Text = p.Title
	pl.X.Label.Text = "seconds into the run"
	pl.Y.Label.Text = units[p.FieldConfig.Defaults.Unit]
	pl.Add(plotter.NewGrid())
	n := 0
	for _, tg := range p.Targets {
		q := grafanaVar.ReplaceAllStringFunc(tg.Expr, func(v string) string {
			switch grafanaVar.FindStringSubmatch(v)[1] {
			case "namespace":
				return namespace
			case "agent":
				return agent
			case "__rate_interval":
				return model.Duration(rateInterval).String()
			}
			return v
		})
		qry, err := engine.NewRangeQuery(context.Background(), db, nil, q, start, end, step)
		if err != nil {
			return nil, 0, fmt.Errorf("panel %q: failed to prepare %s: %w", p.Title, q, err)
		}
		res := qry.Exec(context.Background())
		if res.Err != nil {
			return nil, 0, fmt.Errorf("panel %q: failed to run %s: %w", p.Title, q, res.Err)
		}
		matrix, err := res.Matrix()
		if err != nil {
			return nil, 0, fmt.Errorf("panel %q: %w", p.Title, err)
		}
		for _, s := range matrix {
			var xys plotter.XYs
			for _, f := range s.Floats {
				xys = append(xys, plotter.XY{X: float64(f.T-start.UnixMilli()) / 1000, Y: f.F})
			}
			if len(xys) == 0 {
				continue
			}
			line, err := plotter.NewLine(xys)
			if err != nil {
				return nil, 0, fmt.Errorf("panel %q: %w", p.Title, err)
			}
			line.Color = plotutil.Color(n)
			line.Width = vg.Points(1.5)
			pl.Add(line)
			pl.Legend.Add(legend(tg.LegendFormat, s.Metric), line)
			n++
		}
		qry.Close()
	}
	pl.Legend.Top = true
	pl.Legend.TextStyle.Color = color.Gray{Y: 40}
	return pl, n, nil
}

// legend fills Grafana's {{label}} placeholders.
func legend(format string, ls labels.Labels) string {
	return regexp.MustCompile(`\{\{\s*([a-zA-Z_]+)\s*\}\}`).ReplaceAllStringFunc(format, func(m string) string {
		return ls.Get(strings.Trim(m, "{} "))
	})
}

// drawGrid draws the plots two a row into one PNG.
func drawGrid(plots []*plot.Plot, out string) error {
	const cols = 2
	rows := (len(plots) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, p := range plots {
		grid[i/cols][i%cols] = p
	}
	img := vgimg.New(vg.Points(float64(cols)*480), vg.Points(float64(rows)*300))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(12), PadY: vg.Points(12), PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(8)}
	canvases := plot.Align(grid, tiles, dc)
	for r := range grid {
		for c, p := range grid[r] {
			if p != nil {
				p.Draw(canvases[r][c])
			}
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("failed to create %s: %w", out, err)
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		return fmt.Errorf("failed to write %s: %w", out, err)
	}
	return nil
}
