package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// barMetrics are the figures each scenario's bar charts show: a
// percentile or max of the rows ("p50", "p99", "p999", "max") or an
// extra.
var barMetrics = map[string][]string{
	"gc":     {"max", "max_work_item_ms", "max_queue_wait_ms", "reap_all_s"},
	"gp":     {"p50"},
	"stall":  {"max", "max_between_checkpoints_ms"},
	"read":   {"ns_per_op"},
	"expiry": {"stall_ms", "p999"},
	"daemon": {"p99", "ops_per_s"},
}

// writePlots draws, for each case of rep, the latency of every variant by
// percentile (a CDF with the tail spread out, as HdrHistogram plots it),
// and for the scenario bar charts of its headline figures. Files are named
// SCENARIO-CASE-cdf.EXT and SCENARIO-METRIC.EXT.
func writePlots(dir string, formats []string, rep report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var exts []string
	for _, f := range formats {
		switch f = strings.TrimSpace(f); f {
		case "svg", "png":
			exts = append(exts, f)
		case "":
		default:
			return fmt.Errorf("plot format %q: want svg or png", f)
		}
	}
	save := func(p *plot.Plot, name string, w vg.Length) error {
		for _, ext := range exts {
			if err := p.Save(w, 4*vg.Inch, filepath.Join(dir, name+"."+ext)); err != nil {
				return err
			}
		}
		return nil
	}
	var cases []string
	for _, r := range rep.Results {
		if !contains(cases, r.Case) {
			cases = append(cases, r.Case)
		}
	}
	for _, c := range cases {
		p, ok, err := cdfPlot(rep, c)
		if err != nil {
			return err
		}
		if ok {
			if err := save(p, fmt.Sprintf("%s-%s-cdf", rep.Scenario, c), 6*vg.Inch); err != nil {
				return err
			}
		}
	}
	for _, m := range barMetrics[rep.Scenario] {
		p, err := barPlot(rep, cases, m)
		if err != nil {
			return err
		}
		if err := save(p, fmt.Sprintf("%s-%s", rep.Scenario, strings.ReplaceAll(m, "_", "-")), 6*vg.Inch); err != nil {
			return err
		}
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// percentileTicks labels the transformed x axis (-log10(1-q)) with the
// percentiles people read.
type percentileTicks struct{}

func (percentileTicks) Ticks(min, max float64) []plot.Tick {
	labels := []string{"0%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%"}
	var ts []plot.Tick
	for i, l := range labels {
		if x := float64(i); x >= min-1e-9 && x <= max+1e-9 {
			ts = append(ts, plot.Tick{Value: x, Label: l})
		}
	}
	return ts
}

// cdfPlot draws the latency of each variant of case c by percentile.
func cdfPlot(rep report, c string) (*plot.Plot, bool, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("ukeybench %s: %s", rep.Scenario, c)
	p.X.Label.Text = "percentile"
	p.X.Tick.Marker = percentileTicks{}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = decadeTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.YOffs = -vg.Points(24)
	p.Legend.XOffs = vg.Points(8)
	any := false
	i := 0
	for _, r := range rep.Results {
		if r.Case != c || r.hist == nil || r.hist.TotalCount() == 0 {
			continue
		}
		p.Y.Label.Text = "latency (" + r.Unit + ")"
		if rep.Scenario == "read" {
			p.Y.Label.Text = "time per read, batches of 256 (" + r.Unit + ")"
		}
		pts := cdfPoints(r)
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, false, err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(r.Variant, l)
		any = true
		i++
	}
	p.Add(plotter.NewGrid())
	return p, any, nil
}

// cdfPoints walks r's histogram bucket by bucket: each point is the
// upper end of a bucket at the fraction of samples at or below it, on the
// -log10(1-q) axis, so that the tail gets as much room as the body. The
// last sample sits at log10(n), the percentile that one sample in n
// represents.
func cdfPoints(r row) plotter.XYs {
	n := float64(r.hist.TotalCount())
	end := math.Log10(n)
	pts := plotter.XYs{{X: 0, Y: float64(r.hist.Min()) / r.div}}
	var cum float64
	for _, b := range r.hist.Distribution() {
		if b.Count == 0 {
			continue
		}
		cum += float64(b.Count)
		x := end
		if tail := 1 - cum/n; tail > 0 {
			x = math.Min(-math.Log10(tail), end)
		}
		pts = append(pts, plotter.XY{X: x, Y: float64(b.To) / r.div})
	}
	// Keep a point where the curve moved visibly: a few hundred points
	// draw the same curve as tens of thousands of buckets, in a file a
	// hundredth the size.
	thin := plotter.XYs{pts[0]}
	for i, pt := range pts[1:] {
		last := thin[len(thin)-1]
		if i == len(pts)-2 || pt.X-last.X >= 0.01 || pt.Y > last.Y*1.02 {
			thin = append(thin, pt)
		}
	}
	for i := range thin {
		thin[i].Y = math.Max(thin[i].Y, 1e-3)
	}
	return thin
}

// decadeTicks marks the powers of ten of a log axis with plain numbers.
type decadeTicks struct{}

func (decadeTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		v := math.Pow(10, e)
		label := strconv.FormatFloat(v, 'f', -1, 64)
		if e < -3 || e > 6 {
			label = strconv.FormatFloat(v, 'g', 1, 64)
		}
		ts = append(ts, plot.Tick{Value: v, Label: label})
	}
	return ts
}

// figure returns metric m of r (a percentile, max or an extra) and its
// unit.
func figure(r row, m string) (float64, string) {
	switch m {
	case "p50":
		return r.P50, r.Unit
	case "p99":
		return r.P99, r.Unit
	case "p999":
		return r.P999, r.Unit
	case "max":
		return r.Max, r.Unit
	}
	v, _ := r.Extra[m].(float64)
	unit := ""
	switch {
	case strings.HasSuffix(m, "_ms"):
		unit = "ms"
	case strings.HasSuffix(m, "_s"):
		unit = "s"
	case strings.HasPrefix(m, "ns_"):
		unit = "ns"
	case m == "ops_per_s":
		unit = "operations/s"
	}
	if unit == "" {
		unit = "count"
	}
	return v, unit
}

// barPlot draws metric m for every row: grouped by case (one bar per
// variant) when the scenario has several cases, one bar per variant
// otherwise.
func barPlot(rep report, cases []string, m string) (*plot.Plot, error) {
	p := plot.New()
	p.Legend.Top = true
	p.Legend.YOffs = -vg.Points(24)
	var variants []string
	for _, r := range rep.Results {
		if !contains(variants, r.Variant) {
			variants = append(variants, r.Variant)
		}
	}
	val := func(c, v string) (float64, string) {
		for _, r := range rep.Results {
			if r.Case == c && r.Variant == v {
				return figure(r, m)
			}
		}
		return 0, ""
	}
	unit := ""
	if len(cases) == 1 {
		vs := make(plotter.Values, len(variants))
		for i, v := range variants {
			vs[i], unit = val(cases[0], v)
		}
		b, err := plotter.NewBarChart(vs, vg.Points(28))
		if err != nil {
			return nil, err
		}
		b.Color = plotutil.Color(0)
		p.Add(b)
		p.NominalX(variants...)
	} else {
		w := vg.Points(min(60/float64(len(variants)), 16))
		for i, v := range variants {
			vs := make(plotter.Values, len(cases))
			for j, c := range cases {
				var u string
				vs[j], u = val(c, v)
				if u != "" {
					unit = u
				}
			}
			b, err := plotter.NewBarChart(vs, w)
			if err != nil {
				return nil, err
			}
			b.Color = plotutil.Color(i)
			b.Offset = w * vg.Length(float64(i)-float64(len(variants)-1)/2)
			p.Add(b)
			p.Legend.Add(v, b)
		}
		p.Legend.Left = true
		p.NominalX(cases...)
	}
	p.Title.Text = fmt.Sprintf("ukeybench %s: %s", rep.Scenario, m)
	p.Y.Label.Text = fmt.Sprintf("%s (%s)", m, unit)
	// Room above the bars for the legend.
	p.Y.Min = 0
	p.Y.Max *= 1.4
	p.Add(plotter.NewGrid())
	return p, nil
}
