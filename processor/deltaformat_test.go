package processor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// TestProcess_NewerDeltaFormatIsRefusedNotQuarantined (S16-3): a roll-up
// delta item of a later format than this version reads (written by a
// newer consumer during a rolling deploy) is neither folded nor
// quarantined: the records before it are committed, the call fails at it
// by name (a *BatchError wrapping table.ErrNewerDeltaFormat), counted as
// conflicts_total{reason="newer_delta_format"}, and the item waits in its
// lane; a second call fails alike. Without the format number the item was
// folded by its format-1 reading.
func TestProcess_NewerDeltaFormatIsRefusedNotQuarantined(t *testing.T) {
	for _, mode := range []string{"batch", "marker"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			rtx{"t", "b1", "BRL", "2026-11-02", "1", "INCOME", "10", "food"}.put(t, e, "")
			rtx{"t", "b2", "BRL", "2026-11-02", "2", "INCOME", "5", "rent"}.put(t, e, "")
			item := table.EncodeRollupDelta(aggregates.RollupDeltaKey("t", 3, "future~1~g0", "BRL", 0), "BRL",
				map[aggregates.Period]*aggregates.RollupDelta{day("2026-11-02"): {Report: aggregates.Report{Totals: aggregates.Totals{Count: 1}}}}, time.Now().UTC().Format(time.RFC3339Nano))
			item[table.AttrRollupDeltaFormat] = table.Int(2)
			_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: item})
			require.NoError(t, err)
			rtx{"t", "b3", "BRL", "2026-11-02", "3", "INCOME", "7", "food"}.put(t, e, "")
			_, recs := e.records(t)
			require.Len(t, recs, 5, "the table's settings item, two transactions, the delta, a transaction")

			c := newConsumer(t, e, mode, nil, processor.Config{})
			for attempt := 1; attempt <= 2; attempt++ {
				res, err := c.p.Process(ctx, c.g, recs)
				require.Error(t, err)
				assert.True(t, errors.Is(err, table.ErrNewerDeltaFormat), "%v", err)
				var be *processor.BatchError
				require.ErrorAs(t, err, &be)
				assert.Equal(t, 3, be.Index, "it fails at the newer delta")
				assert.Equal(t, 3, res.Committed, "the records before it are committed")
				assert.Zero(t, res.Quarantined, "not quarantined")
				assert.Equal(t, float64(attempt), testutil.ToFloat64(c.p.Metrics().Conflicts.WithLabelValues(processor.ConflictNewerDeltaFormat)))
			}
			lane := 0
			for _, it := range scanAll(t, e) {
				if _, newer := it[table.AttrRollupDeltaFormat]; newer && aggregates.IsRollupLaneKey(table.KeyOf(it).PK) {
					lane++
				}
			}
			assert.Equal(t, 1, lane, "the newer delta waits in its lane, unfolded")
			diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{})
			require.NoError(t, err)
			for _, d := range diffs {
				assert.Equal(t, "b3", d.Report.Branch, "only the record after the newer delta is not applied: %s", d)
			}
			assert.NotEmpty(t, diffs)
		})
	}
}
