// Package charts draws the benchmark's headline comparisons (BENCHMARKS.md)
// as SVG with gonum.org/v1/plot, from a bench.Result (a run, or a results
// file it wrote): write units per 1,000 changes by approach and workload,
// end-to-end throughput against the raw stream drain, and lag at a steady
// rate. Only cmd/ledgerbench links it.
package charts

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ledger-dev/ledger/bench"
)

// The files Render writes, in this order.
const (
	WriteUnitsFile = "write-units.svg"
	ThroughputFile = "throughput.svg"
	LagFile        = "lag.svg"
)

const width, height = 20 * vg.Centimeter, 12 * vg.Centimeter

// Render writes the charts of res into dir (created if missing) and
// returns their paths. A chart without data in res (a run that skipped
// the lag, say) is not written.
func Render(res *bench.Result, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, c := range []struct {
		file string
		draw func(*bench.Result) (*plot.Plot, error)
	}{
		{WriteUnitsFile, writeUnits},
		{ThroughputFile, throughput},
		{LagFile, lag},
	} {
		p, err := c.draw(res)
		if errors.Is(err, errNoData) {
			continue
		}
		if err != nil {
			return paths, fmt.Errorf("chart %s: %w", c.file, err)
		}
		path := filepath.Join(dir, c.file)
		if err := p.Save(width, height, path); err != nil {
			return paths, fmt.Errorf("chart %s: %w", c.file, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

var errNoData = errors.New("no data")

// headlineBatch is the batch size ledger's approaches are shown at: the
// largest of the run's common batch sizes (1,000 in both documented runs,
// the targets' batch size).
func headlineBatch(res *bench.Result) int {
	if len(res.Config.BatchSizes) == 0 {
		return 1000
	}
	return slices.Max(res.Config.BatchSizes)
}

// rowFor finds approach a's row on workload w: ledger's approaches at the
// headline batch size, the others at the one batch size they ran with.
func rowFor(res *bench.Result, w string, a bench.Approach) (bench.Row, bool) {
	ledger := a.Ledger()
	for _, r := range res.Rows {
		if r.Workload == w && r.Approach == a && (!ledger || r.Batch == headlineBatch(res)) {
			return r, true
		}
	}
	return bench.Row{}, false
}

// workloads lists the run's workloads that have rows, in run order.
func workloads(res *bench.Result) []string {
	var out []string
	for _, r := range res.Rows {
		if !slices.Contains(out, r.Workload) {
			out = append(out, r.Workload)
		}
	}
	return out
}

// runNote names the run under a chart's title.
func runNote(res *bench.Result) string {
	mode := "full run"
	if res.Config.Quick {
		mode = "quick run (small workloads)"
	}
	return fmt.Sprintf("ledgerbench %s, %s, %d CPUs", mode, res.Started.UTC().Format("2006-01-02"), res.Machine.CPUs)
}

// series is one approach's points, with their value labels.
type series struct {
	approach bench.Approach
	name     string
	xys      plotter.XYs
	labels   []string
}

// dots adds each series as glyphs of its approach's colour and shape (the
// same in every chart), with its values written above them, shifted
// sideways by the approach's place so that the approaches of one category
// sit side by side around the category's x.
func dots(p *plot.Plot, all []series) error {
	const spread = 0.15
	for _, s := range all {
		i := slices.Index(bench.Approaches, s.approach)
		shift := (float64(i) - float64(len(bench.Approaches)-1)/2) * spread
		xys := make(plotter.XYs, len(s.xys))
		for j, xy := range s.xys {
			xys[j] = plotter.XY{X: xy.X + shift, Y: xy.Y}
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: plotutil.Color(i), Shape: plotutil.Shape(i), Radius: vg.Points(3.5)}
		p.Add(sc)
		p.Legend.Add(s.name, sc)
		lb, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: s.labels})
		if err != nil {
			return err
		}
		for k := range lb.TextStyle {
			lb.TextStyle[k].Font.Size = vg.Points(7)
			lb.TextStyle[k].Color = color.Gray{Y: 0x30}
			lb.TextStyle[k].Rotation = math.Pi / 2
			lb.TextStyle[k].XAlign = text.XLeft
			lb.TextStyle[k].YAlign = text.YCenter
		}
		lb.Offset = vg.Point{Y: vg.Points(6)}
		p.Add(lb)
	}
	return nil
}

func newPlot(title, note, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title + "\n" + note
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Add(plotter.NewGrid())
	return p
}

// logAxis puts the Y axis on a log scale from below min to well above max,
// leaving the top for the legend.
func logAxis(p *plot.Plot, min, max float64) {
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min = math.Pow(10, math.Floor(math.Log10(min)))
	p.Y.Max = math.Pow(10, math.Ceil(math.Log10(max))+1)
}

// writeUnits: the billed write units of keeping the reports, per 1,000
// changes, for every approach on every workload (log scale: the per-record
// designs cost tens of times what ledger does).
func writeUnits(res *bench.Result) (*plot.Plot, error) {
	ws := workloads(res)
	all, lo, hi := perWorkload(res, ws, func(r bench.Row) (float64, string, bool) {
		v := r.AggregationUnits()
		return v, fmt.Sprintf("%.0f", v), v > 0
	})
	if len(all) == 0 {
		return nil, errNoData
	}
	p := newPlot("Write units (WCU, AWS billing) per 1,000 changes, by approach and workload",
		fmt.Sprintf("%s; ledger at batch size %d", runNote(res), headlineBatch(res)), "WCU per 1,000 changes (log scale)")
	p.NominalX(workloadNames(ws)...)
	logAxis(p, lo, hi)
	p.X.Min, p.X.Max = -0.6, float64(len(ws))-0.4
	return p, dots(p, all)
}

// perWorkload is every approach's points on the workloads ws (x: the
// workload's index), value giving a row's y and label (false: no point),
// and the least and greatest y.
func perWorkload(res *bench.Result, ws []string, value func(bench.Row) (float64, string, bool)) (all []series, lo, hi float64) {
	lo = math.Inf(1)
	for _, a := range bench.Approaches {
		s := series{approach: a, name: string(a)}
		for i, w := range ws {
			r, ok := rowFor(res, w, a)
			if !ok {
				continue
			}
			v, label, ok := value(r)
			if !ok {
				continue
			}
			s.xys = append(s.xys, plotter.XY{X: float64(i), Y: v})
			s.labels = append(s.labels, label)
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		if len(s.xys) > 0 {
			all = append(all, s)
		}
	}
	return all, lo, hi
}

// throughput: changes per second end to end as a share of the raw drain
// rate of the same stream, for the stream approaches (approach 3 has no
// stream), with issue 6's 80% target.
func throughput(res *bench.Result) (*plot.Plot, error) {
	ws := workloads(res)
	all, _, hi := perWorkload(res, ws, func(r bench.Row) (float64, string, bool) {
		if r.RawRate() <= 0 || r.Took <= 0 {
			return 0, "", false
		}
		share := 100 * r.Throughput() / r.RawRate()
		return share, fmt.Sprintf("%.0f%% (%.0f/s)", share, r.Throughput()), true
	})
	if len(all) == 0 {
		return nil, errNoData
	}
	p := newPlot("End-to-end throughput as a share of the raw stream drain rate",
		fmt.Sprintf("%s; ledger at batch size %d", runNote(res), headlineBatch(res)), "changes/s ÷ raw drain records/s (%)")
	p.NominalX(workloadNames(ws)...)
	p.X.Min, p.X.Max = -0.6, float64(len(ws))-0.4
	p.Y.Min, p.Y.Max = 0, math.Max(100, hi)*1.5
	target, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: 80}, {X: p.X.Max, Y: 80}})
	if err != nil {
		return nil, err
	}
	target.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	target.LineStyle.Color = color.Gray{Y: 0x80}
	p.Add(target)
	p.Legend.Add("target for ledger: 80% of the raw drain", target)
	return p, dots(p, all)
}

// lag: write → report commit, p50 and p99, per approach at the run's
// steady rate (log scale).
func lag(res *bench.Result) (*plot.Plot, error) {
	if len(res.Lag) == 0 {
		return nil, errNoData
	}
	var all []series
	lo, hi := math.Inf(1), 0.0
	for _, l := range res.Lag {
		s := series{approach: l.Approach, name: string(l.Approach)}
		if !l.Sustained {
			s.name += " (did not keep up)"
		}
		for i, v := range []float64{l.P50, l.P99} {
			if v <= 0 {
				continue
			}
			s.xys = append(s.xys, plotter.XY{X: float64(i), Y: v})
			s.labels = append(s.labels, seconds(v))
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		if len(s.xys) > 0 {
			all = append(all, s)
		}
	}
	if len(all) == 0 {
		return nil, errNoData
	}
	p := newPlot(fmt.Sprintf("Lag from write to report commit at %d changes/s (workload b)", res.LagRate),
		fmt.Sprintf("%s; %d s per approach", runNote(res), res.Config.LagSeconds), "seconds (log scale)")
	p.NominalX("p50", "p99")
	p.X.Min, p.X.Max = -0.6, 1.6
	logAxis(p, lo, hi)
	return p, dots(p, all)
}

func workloadNames(ws []string) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = "workload " + w
	}
	return out
}

func seconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}
