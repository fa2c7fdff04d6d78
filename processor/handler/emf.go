package handler

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// EMF turns the processor's Prometheus collectors into one CloudWatch
// Embedded Metric Format line per invocation, so that the Lambda reports
// the figures the poller serves on /metrics, from the same definitions
// (processor/metrics.go). Each Emit gathers the registry and writes what
// changed since the previous Emit:
//
//   - a counter as its delta under its Prometheus name, summed over its
//     labels (always present, 0 included, so that alarms see data), and
//     every labelled series whose delta is not zero as
//     name{label=value,...}, e.g. ledger_commits_total{outcome=failed};
//   - a gauge as the largest value of its series, under its name, when it
//     has any series (the handler resets the iterator age per invocation);
//   - a histogram with new observations as name_count and name_sum (the
//     deltas, as Prometheus names them) and under its own name an array of
//     at most 100 values: the exact value when there was one observation,
//     otherwise values spread over the buckets that received observations
//     (as Prometheus' histogram_quantile interpolates), so that CloudWatch
//     percentiles follow the bucket resolution. Their sample count is not
//     the observation count; name_count is.
//
// Units: Seconds for names with a _seconds part, Count otherwise.
// Dimensions are fixed per process (FunctionName and Mode). Per-invocation
// deltas assume one invocation at a time per process, as the Lambda
// runtime delivers them.
type EMF struct {
	mu         sync.Mutex
	g          prometheus.Gatherer
	w          io.Writer
	namespace  string
	dimensions []string // ordered names
	dimValues  map[string]string
	now        func() time.Time
	prev       snapshot
}

// maxEMFMetrics is EMF's limit of metrics per directive; maxEMFValues its
// limit of values per metric.
const (
	maxEMFMetrics = 100
	maxEMFValues  = 100
)

// NewEMF returns an emitter writing to w, with the given dimensions (name →
// value; emitted as one dimension set). It takes the registry's current
// values as the baseline.
func NewEMF(g prometheus.Gatherer, w io.Writer, namespace string, dims map[string]string, now func() time.Time) (*EMF, error) {
	if now == nil {
		now = time.Now
	}
	e := &EMF{g: g, w: w, namespace: namespace, dimValues: dims, now: now}
	for k := range dims {
		e.dimensions = append(e.dimensions, k)
	}
	sort.Strings(e.dimensions)
	fams, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	e.prev = takeSnapshot(fams)
	return e, nil
}

type snapshot struct {
	counters map[string]float64
	hists    map[string]histogram
}

type histogram struct {
	count   uint64
	sum     float64
	uppers  []float64
	buckets []uint64 // cumulative, as in the DTO
}

type metricDef struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type directive struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []metricDef `json:"Metrics"`
}

// Emit writes one EMF line: the metrics that changed since the last Emit,
// and props as extra members (request id, outcome; never names that clash
// with a metric or dimension). It returns the write's error.
func (e *EMF) Emit(props map[string]any) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	fams, err := e.g.Gather()
	if err != nil {
		return fmt.Errorf("gather metrics: %w", err)
	}
	cur := takeSnapshot(fams)
	doc := make(map[string]any, len(props)+len(e.dimValues)+32)
	for k, v := range props {
		doc[k] = v
	}
	var defs []metricDef
	add := func(name string, v any) {
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return // JSON has no such numbers
		}
		doc[name] = v
		defs = append(defs, metricDef{Name: name, Unit: unitOf(name)})
	}
	sort.Slice(fams, func(i, j int) bool { return fams[i].GetName() < fams[j].GetName() })
	for _, f := range fams {
		name := f.GetName()
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			var total float64
			for _, m := range f.GetMetric() {
				key := seriesKey(name, m)
				d := cur.counters[key] - e.prev.counters[key]
				if d < 0 { // a reset; cannot happen with one registry per process
					d = cur.counters[key]
				}
				total += d
				if len(m.GetLabel()) > 0 && d != 0 {
					add(key, d)
				}
			}
			add(name, total)
		case dto.MetricType_GAUGE:
			if len(f.GetMetric()) == 0 {
				continue
			}
			v := math.Inf(-1)
			for _, m := range f.GetMetric() {
				v = math.Max(v, m.GetGauge().GetValue())
			}
			add(name, v)
		case dto.MetricType_HISTOGRAM:
			var d histogram
			for _, m := range f.GetMetric() {
				key := seriesKey(name, m)
				d = d.plus(cur.hists[key].minus(e.prev.hists[key]))
			}
			if d.count == 0 {
				continue
			}
			add(name+"_count", d.count)
			add(name+"_sum", d.sum)
			add(name, d.values(maxEMFValues))
		}
	}
	var dirs []directive
	for len(defs) > 0 {
		n := min(len(defs), maxEMFMetrics)
		dirs = append(dirs, directive{Namespace: e.namespace, Dimensions: [][]string{e.dimensions}, Metrics: defs[:n]})
		defs = defs[n:]
	}
	for k, v := range e.dimValues {
		doc[k] = v
	}
	doc["_aws"] = map[string]any{
		"Timestamp":         e.now().UnixMilli(),
		"CloudWatchMetrics": dirs,
	}
	line, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("encode EMF line: %w", err)
	}
	e.prev = cur
	_, err = e.w.Write(append(line, '\n'))
	return err
}

func unitOf(name string) string {
	base := name
	if i := strings.IndexByte(base, '{'); i >= 0 {
		base = base[:i]
	}
	switch {
	case strings.HasSuffix(base, "_seconds_count"):
		return "Count"
	case strings.HasSuffix(base, "_seconds"), strings.HasSuffix(base, "_seconds_sum"):
		return "Seconds"
	}
	return "Count"
}

// seriesKey names one series: the metric's name, and its labels in the
// order the registry gives them (sorted by name) as {label=value,...}.
func seriesKey(name string, m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return name
	}
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, l := range m.GetLabel() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.GetName())
		b.WriteByte('=')
		b.WriteString(l.GetValue())
	}
	b.WriteByte('}')
	return b.String()
}

func takeSnapshot(fams []*dto.MetricFamily) snapshot {
	s := snapshot{counters: map[string]float64{}, hists: map[string]histogram{}}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			key := seriesKey(f.GetName(), m)
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				s.counters[key] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				hs := histogram{count: h.GetSampleCount(), sum: h.GetSampleSum()}
				for _, b := range h.GetBucket() {
					hs.uppers = append(hs.uppers, b.GetUpperBound())
					hs.buckets = append(hs.buckets, b.GetCumulativeCount())
				}
				s.hists[key] = hs
			}
		}
	}
	return s
}

// minus returns the observations of h not in prev (same buckets).
func (h histogram) minus(prev histogram) histogram {
	d := histogram{count: h.count - prev.count, sum: h.sum - prev.sum, uppers: h.uppers, buckets: make([]uint64, len(h.buckets))}
	for i := range h.buckets {
		d.buckets[i] = h.buckets[i]
		if i < len(prev.buckets) {
			d.buckets[i] -= prev.buckets[i]
		}
	}
	return d
}

// plus merges two deltas of series with the same buckets.
func (h histogram) plus(o histogram) histogram {
	if h.uppers == nil {
		return o
	}
	out := histogram{count: h.count + o.count, sum: h.sum + o.sum, uppers: h.uppers, buckets: make([]uint64, len(h.buckets))}
	for i := range h.buckets {
		out.buckets[i] = h.buckets[i]
		if i < len(o.buckets) {
			out.buckets[i] += o.buckets[i]
		}
	}
	return out
}

// values returns at most limit representative values of the observations of
// the delta h: the exact value when there is one, else values spread
// evenly inside each bucket that holds observations, in proportion to its
// count (every such bucket gets at least one). Observations above the last
// bound are represented by what the sum leaves for them, at least the
// bound.
func (h histogram) values(limit int) []float64 {
	if h.count == 0 {
		return nil
	}
	if h.count == 1 {
		return []float64{h.sum}
	}
	type bucket struct {
		lower, upper float64
		count        uint64
	}
	var bs []bucket
	lower, prevCum := 0.0, uint64(0)
	for i, upper := range h.uppers {
		if math.IsInf(upper, +1) {
			break
		}
		if c := h.buckets[i] - prevCum; c > 0 {
			bs = append(bs, bucket{lower: math.Min(lower, upper), upper: upper, count: c})
		}
		lower, prevCum = upper, h.buckets[i]
	}
	var finiteSum float64
	for _, b := range bs {
		finiteSum += float64(b.count) * (b.lower + b.upper) / 2
	}
	if over := h.count - prevCum; over > 0 {
		v := math.Max(lower, (h.sum-finiteSum)/float64(over))
		bs = append(bs, bucket{lower: v, upper: v, count: over})
	}
	// Share out the values: proportional, at least one per bucket.
	n := make([]int, len(bs))
	total := 0
	for i, b := range bs {
		n[i] = max1(int(float64(b.count) * float64(limit) / float64(h.count)))
		if uint64(n[i]) > b.count {
			n[i] = int(b.count)
		}
		total += n[i]
	}
	for total > limit {
		big := 0
		for i := range n {
			if n[i] > n[big] {
				big = i
			}
		}
		n[big]--
		total--
	}
	out := make([]float64, 0, total)
	for i, b := range bs {
		for j := 0; j < n[i]; j++ {
			out = append(out, b.lower+(b.upper-b.lower)*(float64(j)+0.5)/float64(n[i]))
		}
	}
	return out
}

func max1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}
