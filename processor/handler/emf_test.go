package handler_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/handler"
)

// emfLine is the shape of an EMF document, for checking.
type emfLine struct {
	AWS struct {
		Timestamp         int64 `json:"Timestamp"`
		CloudWatchMetrics []struct {
			Namespace  string     `json:"Namespace"`
			Dimensions [][]string `json:"Dimensions"`
			Metrics    []struct {
				Name string `json:"Name"`
				Unit string `json:"Unit"`
			} `json:"Metrics"`
		} `json:"CloudWatchMetrics"`
	} `json:"_aws"`
}

// parseEMF checks the EMF rules on one line and returns the document and
// the metrics it defines (name → unit).
func parseEMF(t *testing.T, line []byte) (map[string]any, map[string]string) {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(line, &doc), "%s", line)
	var l emfLine
	require.NoError(t, json.Unmarshal(line, &l))
	require.NotEmpty(t, l.AWS.CloudWatchMetrics)
	assert.NotZero(t, l.AWS.Timestamp)
	units := map[string]string{}
	for _, d := range l.AWS.CloudWatchMetrics {
		assert.Equal(t, "ledger", d.Namespace)
		assert.LessOrEqual(t, len(d.Metrics), 100, "EMF allows 100 metrics per directive")
		for _, set := range d.Dimensions {
			for _, dim := range set {
				assert.IsType(t, "", doc[dim], "dimension %s must be a string member of the root", dim)
			}
		}
		for _, m := range d.Metrics {
			switch v := doc[m.Name].(type) {
			case float64:
			case []any:
				assert.LessOrEqual(t, len(v), 100, "EMF allows 100 values per metric")
				for _, e := range v {
					assert.IsType(t, float64(0), e)
				}
			default:
				t.Errorf("metric %s has value %v (%T); want a number or an array of numbers", m.Name, doc[m.Name], doc[m.Name])
			}
			assert.Contains(t, []string{"Count", "Seconds"}, m.Unit)
			units[m.Name] = m.Unit
		}
	}
	return doc, units
}

func TestEMF_OneLinePerEmitWithTheDeltasOfTheProcessorMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := processor.NewMetrics(reg)
	m.Records.WithLabelValues("INSERT", processor.OutcomeApplied).Add(5) // before the emitter: not in any delta
	var out bytes.Buffer
	now := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	emf, err := handler.NewEMF(reg, &out, "ledger", map[string]string{"FunctionName": "ledger-fn", "Mode": "standard"}, func() time.Time { return now })
	require.NoError(t, err)

	m.Records.WithLabelValues("INSERT", processor.OutcomeApplied).Add(3)
	m.Records.WithLabelValues("REMOVE", processor.OutcomeDuplicate).Add(2)
	m.Commits.WithLabelValues("failed").Inc()
	m.BatchSize.Observe(42)
	m.BatchDuration.Observe(0.25)
	for _, v := range []float64{0.01, 0.02, 0.3, 0.4, 7, 4000} {
		m.Lag.Observe(v)
	}
	m.IteratorAge.WithLabelValues("").Set(12)
	require.NoError(t, emf.Emit(map[string]any{"RequestId": "req-1"}))

	lines := bytes.Split(bytes.TrimSuffix(out.Bytes(), []byte("\n")), []byte("\n"))
	require.Len(t, lines, 1, "one line per emit")
	doc, units := parseEMF(t, lines[0])
	assert.Equal(t, float64(now.UnixMilli()), doc["_aws"].(map[string]any)["Timestamp"])
	assert.Equal(t, "ledger-fn", doc["FunctionName"])
	assert.Equal(t, "standard", doc["Mode"])
	assert.Equal(t, "req-1", doc["RequestId"])
	dirs := doc["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)
	assert.Equal(t, []any{[]any{"FunctionName", "Mode"}}, dirs[0].(map[string]any)["Dimensions"])

	assert.Equal(t, 5.0, doc["ledger_records_total"], "the sum of the label series' deltas")
	assert.Equal(t, 3.0, doc["ledger_records_total{event=INSERT,outcome=applied}"])
	assert.Equal(t, 2.0, doc["ledger_records_total{event=REMOVE,outcome=duplicate}"])
	assert.NotContains(t, doc, "ledger_records_total{event=MODIFY,outcome=applied}", "unchanged series are left out")
	assert.Equal(t, 1.0, doc["ledger_commits_total"])
	assert.Equal(t, 1.0, doc["ledger_commits_total{outcome=failed}"])
	assert.Equal(t, 0.0, doc["ledger_aggregate_conflicts_total"], "counter totals are always there")
	assert.Equal(t, 1.0, doc["ledger_batch_records_count"])
	assert.Equal(t, 42.0, doc["ledger_batch_records_sum"])
	assert.Equal(t, []any{42.0}, doc["ledger_batch_records"], "one observation is exact")
	assert.Equal(t, []any{0.25}, doc["ledger_batch_duration_seconds"])
	assert.Equal(t, 6.0, doc["ledger_stream_lag_seconds_count"])
	assert.InDelta(t, 4007.73, doc["ledger_stream_lag_seconds_sum"], 1e-9)
	lag := doc["ledger_stream_lag_seconds"].([]any)
	require.Len(t, lag, 6)
	assert.LessOrEqual(t, lag[0].(float64), 0.05)
	assert.GreaterOrEqual(t, lag[5].(float64), 3600.0)
	assert.Equal(t, 12.0, doc["ledger_stream_iterator_age_seconds"])

	assert.Equal(t, "Seconds", units["ledger_stream_lag_seconds"])
	assert.Equal(t, "Seconds", units["ledger_stream_lag_seconds_sum"])
	assert.Equal(t, "Count", units["ledger_stream_lag_seconds_count"])
	assert.Equal(t, "Count", units["ledger_records_total"])
	assert.Equal(t, "Seconds", units["ledger_stream_iterator_age_seconds"])
	for name := range units {
		assert.Contains(t, doc, name)
	}

	// The next emit carries only what happened since.
	out.Reset()
	m.Records.WithLabelValues("MODIFY", processor.OutcomeQuarantined).Inc()
	require.NoError(t, emf.Emit(nil))
	doc, _ = parseEMF(t, bytes.TrimSpace(out.Bytes()))
	assert.Equal(t, 1.0, doc["ledger_records_total"])
	assert.Equal(t, 1.0, doc["ledger_records_total{event=MODIFY,outcome=quarantined}"])
	assert.NotContains(t, doc, "ledger_records_total{event=INSERT,outcome=applied}")
	assert.Equal(t, 0.0, doc["ledger_commits_total"])
	assert.NotContains(t, doc, "ledger_batch_records_count", "histograms without observations are left out")
}

func TestEMF_ManyObservationsAreSummarisedInAtMost100Values(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := processor.NewMetrics(reg)
	var out bytes.Buffer
	emf, err := handler.NewEMF(reg, &out, "ledger", map[string]string{"Mode": "tumbling"}, nil)
	require.NoError(t, err)
	for i := 0; i < 5000; i++ {
		m.Lag.Observe(float64(i%100) / 10) // 0 to 9.9 s
	}
	require.NoError(t, emf.Emit(nil))
	doc, _ := parseEMF(t, bytes.TrimSpace(out.Bytes()))
	lag := doc["ledger_stream_lag_seconds"].([]any)
	assert.LessOrEqual(t, len(lag), 100)
	assert.Greater(t, len(lag), 90)
	var below1 int
	for _, v := range lag {
		if v.(float64) <= 1 {
			below1++
		}
	}
	// 11% of the observations are at most 1 s; the summary keeps the shape.
	assert.InDelta(t, 11, below1*100/len(lag), 3)
	assert.Equal(t, 5000.0, doc["ledger_stream_lag_seconds_count"])
}
