package processor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/bench"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// TestRollupWriteUnits_CountedByKindAsTheMeterBillsThem: the consumers'
// ledger_rollup_write_units_total{kind} (issue 24, hole 9) is what AWS
// bills for the roll-up items, as the write meter (bench.Meter, a client
// that keeps a copy of every item and bills each write by AWS's rules)
// counts it: the delta puts and deletes exactly, the partials' report and
// entry items from below by their figures' digits only. Two tenants'
// transactions and two hand-put deltas of one lane with more names than a
// partial holds inline (so entry items are written), folded to the end.
func TestRollupWriteUnits_CountedByKindAsTheMeterBillsThem(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	meter := bench.NewMeter(e.ddb)
	p, err := processor.New(meter, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}, processor.NewMetrics(reg))
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shardOf(t, e))
	g.CommitBatches()
	c := &consumer{t: t, e: e, p: p, mode: "batch", g: g, delivered: map[string]bool{}}

	var txs []rtx
	for i := range 240 {
		txs = append(txs, rtx{"acme", fmt.Sprintf("b%d", i%2), "BRL", "2026-11-27", fmt.Sprint(i), "EXPENSE", fmt.Sprintf("%d.25", i+1),
			fmt.Sprintf("category-%03d-%s", i%120, strings.Repeat("x", 40))})
	}
	for i := range 10 {
		txs = append(txs, rtx{"beta", "tokyo", "JPY", "2026-11-27", fmt.Sprint(i), "INCOME", "500", "food"})
	}
	for _, tx := range txs {
		tx.put(t, e, "")
	}
	// Two deltas in one lane with 30 names each (a delta item holds 32 of
	// a period at most): its partial gets 60, 28 past the inline ones.
	for i := range 2 {
		delta := &aggregates.RollupDelta{Branches: 1}
		for n := range 30 {
			delta.Add(aggregates.Totals{Income: decimal.RequireFromString("7.5"), Count: 1}, [3]string{fmt.Sprintf("lane-name-%d-%02d", i, n), "", ""})
		}
		key := aggregates.RollupDeltaKey("acme", 5, fmt.Sprintf("by-hand-%d", i), "BRL", 0)
		item := table.EncodeRollupDelta(key, "BRL", map[aggregates.Period]*aggregates.RollupDelta{day("2026-11-27"): delta}, "2026-11-27T10:00:00Z")
		// Through the meter, so that it knows the item its fold deletes.
		_, err := meter.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &e.table, Item: item})
		require.NoError(t, err)
	}
	byHand := meter.Cost().Units // the hand puts: no consumer's
	c.drain()                    // (the hand-put deltas are no transactions': no oracle here)

	units := func(kind string) int {
		return int(testutil.ToFloat64(p.Metrics().RollupWriteUnits.WithLabelValues(kind)))
	}
	var lanes, partials int
	for _, r := range meter.KeyRates(0) {
		switch {
		case strings.Contains(r.PK, "#ROLLUPLANE#"):
			lanes += r.Units
		case strings.Contains(r.PK, "#ROLLUP#"):
			partials += r.Units
		}
	}
	cost := meter.Cost()
	t.Logf("roll-up units: delta puts %d, deletes %d, partials %d, entries %d; meter: lanes %d, partials %d (%d failed writes)",
		units(processor.RollupCostDeltaPut), units(processor.RollupCostDeltaDelete), units(processor.RollupCostPartial), units(processor.RollupCostEntry),
		lanes, partials, cost.Failed)
	require.Positive(t, units(processor.RollupCostEntry), "60 names in one lane: 28 past its partial's inline ones")
	if cost.Failed == 0 {
		assert.Equal(t, lanes-byHand, units(processor.RollupCostDeltaPut)+units(processor.RollupCostDeltaDelete), "delta items: exact")
	} else {
		assert.LessOrEqual(t, units(processor.RollupCostDeltaPut)+units(processor.RollupCostDeltaDelete), lanes-byHand, "the meter bills cancelled attempts too")
	}
	est := units(processor.RollupCostPartial) + units(processor.RollupCostEntry)
	assert.LessOrEqual(t, est, partials, "partials: an estimate from below")
	assert.GreaterOrEqual(t, float64(est), 0.75*float64(partials), "partials: short only by the figures' digits")
}
