package charts_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/bench"
	"github.com/ledger-dev/ledger/bench/charts"
)

// testdata/results.json is part of a real quick run's results file
// (ledgerbench -quick -json): workloads a and b, and the lag.
func golden(t *testing.T) *bench.Result {
	t.Helper()
	res, err := bench.ReadResultFile(filepath.Join("testdata", "results.json"))
	require.NoError(t, err)
	return res
}

func TestRender_DrawsEachChartWithItsSeries(t *testing.T) {
	dir := t.TempDir()
	paths, err := charts.Render(golden(t), dir)
	require.NoError(t, err)
	require.Equal(t, []string{
		filepath.Join(dir, charts.WriteUnitsFile),
		filepath.Join(dir, charts.ThroughputFile),
		filepath.Join(dir, charts.LagFile),
	}, paths)

	stream := []bench.Approach{bench.PerRecordSeed, bench.PerRecordMarker, bench.LedgerPoller, bench.LedgerLambda, bench.LedgerTumbling}
	tests := []struct {
		file       string
		want, none []string
	}{
		{charts.WriteUnitsFile, append(names(bench.Approaches...), "Write units", "workload a", "workload b", "quick run"), []string{"workload c"}},
		// Approach 3 has no stream to drain: it has no point here.
		{charts.ThroughputFile, append(names(stream...), "raw stream drain", "target for ledger: 80%"), names(bench.SyncTransaction)},
		{charts.LagFile, append(names(bench.Approaches...), "p50", "p99", "Lag from write to report commit"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(dir, tt.file))
			require.NoError(t, err)
			svg := string(raw)
			assert.True(t, strings.HasPrefix(svg, "<?xml"), "an XML document")
			assert.Contains(t, svg, "<svg")
			for _, w := range tt.want {
				assert.Contains(t, svg, w)
			}
			for _, n := range tt.none {
				assert.NotContains(t, svg, n)
			}
		})
	}
}

// A run without a lag measurement (-skip lag) gets no lag chart; the
// others are still drawn.
func TestRender_LeavesOutChartsWithoutData(t *testing.T) {
	res := golden(t)
	res.Lag = nil
	dir := t.TempDir()
	paths, err := charts.Render(res, dir)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, charts.WriteUnitsFile), filepath.Join(dir, charts.ThroughputFile)}, paths)
	assert.NoFileExists(t, filepath.Join(dir, charts.LagFile))
}

func names(as ...bench.Approach) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = string(a)
	}
	return out
}
