package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResultJSON_RoundTripsEveryFigureTheChartsRead(t *testing.T) {
	res := &Result{
		Config:  Quick(),
		Started: time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC),
		Rows: []Row{{Workload: "b", Approach: LedgerPoller, Batch: 1000, Changes: 120,
			Cost: Cost{Units: 700, Requests: map[string]int{"TransactWriteItems": 3}}, Took: 2 * time.Second,
			RawRecords: 121, RawTook: time.Second, Sizes: &ItemSizes{ReportItems: 9, P50: 700}}},
		Lag:     []LagRow{{Approach: LedgerPoller, Samples: 10, P50: 0.2, P99: 0.5, Sustained: true}},
		LagRate: 10,
	}
	res.Config.Log = &bytes.Buffer{} // not part of the results
	var buf bytes.Buffer
	require.NoError(t, res.WriteJSON(&buf))
	got, err := ReadResult(&buf)
	require.NoError(t, err)
	res.Config.Log = nil
	assert.Equal(t, res, got)
	assert.InDelta(t, 60.0, got.Rows[0].Throughput(), 1e-9)
}

func TestReadResult_RefusesWhatIsNotAResult(t *testing.T) {
	for in, want := range map[string]string{
		`{"Rows": []}`: "no rows",
		`not json`:     "invalid character",
		``:             "EOF",
	} {
		_, err := ReadResult(strings.NewReader(in))
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), want, in)
	}
}
