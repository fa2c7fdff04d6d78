package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	ledgertable "github.com/ledger-dev/ledger/table"
)

func TestWorkloads_HaveTheIssuesShape(t *testing.T) {
	const n = 10000
	for _, w := range []WorkloadSpec{WorkloadA, WorkloadB, WorkloadC, WorkloadD, WorkloadE} {
		t.Run(w.Name, func(t *testing.T) {
			ops := w.Generate(n, 6)
			assert.Equal(t, ops, w.Generate(n, 6), "deterministic for a seed")
			kinds := map[OpKind]int{}
			branches := map[string]bool{}
			var created []string
			inOrder, backdated := 0, 0
			prev := ""
			for _, op := range ops {
				kinds[op.Kind]++
				if op.Kind != OpInsert {
					continue
				}
				branches[str(op.New["branchId"])] = true
				c := str(op.New["createdAt"])
				created = append(created, c)
				if c >= prev {
					inOrder++
					prev = c
				} else {
					backdated++
				}
				require.NotNil(t, txOf(op.New), "every insert is a valid transaction")
			}
			if w.Name == "e" {
				costCentres, categories := map[string]bool{}, map[string]bool{}
				for _, op := range ops {
					if op.New != nil {
						costCentres[str(op.New["costCenter"])] = true
						categories[str(op.New["category"])] = true
					}
				}
				assert.Greater(t, len(costCentres), 7000, "high cardinality: most changes name a new cost centre")
				assert.Greater(t, len(categories), 1900)
			}
			share := func(k OpKind) float64 { return float64(kinds[k]) / n }
			assert.InDelta(t, w.ModifyShare, share(OpModify), 0.01)
			assert.InDelta(t, w.DeleteShare, share(OpDelete), 0.01)
			assert.InDelta(t, float64(w.Branches), float64(len(branches)), float64(w.Branches)*0.01+1)
			if w.Shuffled {
				assert.False(t, sort.StringsAreSorted(created), "a backfill arrives in random order")
				return
			}
			// Live workloads arrive in createdAt order but for the
			// corrections, about 5% of the inserts, backdated.
			assert.InDelta(t, 0.05, float64(backdated)/float64(len(created)), 0.01)
		})
	}
}

// The CI smoke run of `ledgerbench -quick`: every measurement on small
// workloads, with figures that hold together (its duration is logged, not
// asserted: timings belong to benchmarks).
func TestQuick_RunsEveryMeasurement(t *testing.T) {
	cfg := Quick()
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	start := time.Now()
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	t.Logf("quick run took %s\n%s", time.Since(start), res)

	rows := 0
	for _, w := range cfg.Workloads {
		rows += 3*len(cfg.BatchSizes) + len(cfg.PollerBatches) // poller, Lambda standard and tumbling
		if !w.Spec.LedgerOnly {
			rows += 3
		}
	}
	require.Len(t, res.Rows, rows)
	for _, r := range res.Rows {
		name := r.Workload + " " + string(r.Approach)
		assert.Equal(t, float64(r.Cost.LocalUnits), r.Cost.Reported, "%s: computed capacity equals DynamoDB Local's", name)
		assert.Positive(t, r.Cost.Units, name)
		assert.Positive(t, r.Redelivered, "%s: duplicates were delivered", name)
		if r.Workload == "b" && r.Approach == PerRecordSeed {
			assert.Positive(t, r.Diffs, "approach 1 counts a duplicate twice")
		} else {
			assert.Zero(t, r.Diffs, "%s: exact under duplicates", name)
		}
		if r.Approach.Ledger() {
			require.NotNil(t, r.Sizes, name)
			assert.LessOrEqual(t, r.Sizes.Max, ledgertable.MaxReportItemBytes, "%s: report items stay bounded", name)
			if r.Workload == "e" {
				assert.Positive(t, r.Sizes.EntryItems, "%s: the yearly report's names spill to entry items", name)
			}
		}
	}
	tumbling := 0
	for _, r := range res.Rows {
		if r.Approach == LedgerTumbling {
			tumbling++
			assert.Positive(t, r.ItemWriteRate(), "%s %s", r.Workload, r.Approach)
		}
	}
	assert.Equal(t, len(cfg.Workloads)*len(cfg.BatchSizes), tumbling, "the tumbling Lambda on every workload at every batch size")
	// DynamoDB Local's own item-write rate, before and after the
	// backlogs: each write kind with one and with several writers, every
	// figure measured.
	require.Len(t, res.WriteRates, 8)
	for _, w := range res.WriteRates {
		assert.Positive(t, w.Requests, "%s × %d", w.Op, w.Workers)
		assert.Positive(t, w.PerSecond(), "%s × %d", w.Op, w.Workers)
		if w.Op == "TransactWriteItems" {
			assert.Equal(t, writeRateBatch*w.Requests, w.ItemWrites, "a transaction of %d updates", writeRateBatch)
		}
	}
	require.Len(t, res.Lag, len(Approaches))
	for _, l := range res.Lag {
		assert.True(t, l.Sustained, l.Approach)
		assert.Positive(t, l.Samples, l.Approach)
	}
	require.Len(t, res.CPU, 2)
	checkCalendarMeasurements(t, cfg, res)
	md := res.String()
	for _, want := range []string{"### Backlog", "### Lag", "### CPU", "### Targets", "| b | 4 ledger: poller | 1000 |", "| b | 4 ledger: poller | 10000 |", "| b | 4 ledger: Lambda handler (tumbling) | 1000 |", "DynamoDB Local's own item-write rate in this run", "commits a window when it closes", "| e | 4 ledger: poller | 1000 |", "### Report item sizes", "Beyond the targets' batch size",
		"### Period types (issue 22)", "| 7: DAILY, WEEKLY, MONTHLY, QUARTERLY, YEARLY, FISCAL_QUARTER, FISCAL_YEAR | America/Sao_Paulo, 7 types | 10000 |", "5 types cost", "### rebucket (issue 22)", "not AWS's"} {
		assert.True(t, strings.Contains(md, want), "markdown has %q", want)
	}
}

// `ledgerbench -skip backlogs,lag,cpu,periods,rebucket -backlog N -reconcile-parallel 1`:
// the memory measurement alone (the poller binary's drain, then
// `ledgerctl reconcile --parallel 1` over the drained table), on a small
// backlog.
func TestMemoryAlone_SkipsTheOtherMeasurements(t *testing.T) {
	cfg := Quick()
	cfg.SkipBacklogs, cfg.SkipLag, cfg.SkipCPU = true, true, true
	cfg.PeriodChanges, cfg.RebucketTransactions = 0, 0
	cfg.Backlog, cfg.ReconcileParallel = 2000, 1
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Empty(t, res.Rows)
	assert.Empty(t, res.Lag)
	assert.Empty(t, res.CPU)
	assert.Empty(t, res.Periods)
	assert.Empty(t, res.Rebucket)
	m := res.Memory
	require.NotNil(t, m)
	assert.Equal(t, 2000, m.Records)
	assert.Positive(t, m.Reports)
	assert.Zero(t, m.Diffs, "the drained reports equal the fold of the backlog")
	assert.Zero(t, m.ReconcileExit, "ledgerctl reconcile finds no difference")
	assert.Equal(t, "ledgerctl reconcile --parallel 1", m.ReconcileCommand)
	if runtime.GOOS == "linux" {
		assert.Positive(t, m.PeakRSS)
		assert.Positive(t, m.ReconcileRSS)
	}
	md := res.String()
	assert.Contains(t, md, "### `ledgerctl reconcile --parallel 1` over the drained table")
	assert.NotContains(t, md, "### Backlog")
	assert.NotContains(t, md, "### Report item sizes")
}

// checkCalendarMeasurements checks issue 22's figures: workload b with 3,
// 5 and 7 period types (and unstamped) side by side, each exact, more types
// costing more; a rebucket that moves every transaction, billed as DynamoDB
// Local reports, exact after the poller's drain, a second run moving none.
func checkCalendarMeasurements(t *testing.T, cfg Config, res *Result) {
	t.Helper()
	require.Len(t, res.Periods, 4, "unstamped, 3, 5 and 7 types")
	assert.Empty(t, res.Periods[0].Stamping, "the first row is the workload unstamped")
	for i, p := range res.Periods {
		name := fmt.Sprintf("%d types, %q", len(p.Types), p.Stamping)
		assert.Equal(t, cfg.PeriodChanges, p.Changes, name)
		assert.Zero(t, p.Diffs, "%s: exact under duplicates", name)
		assert.Equal(t, float64(p.Cost.LocalUnits), p.Cost.Reported, "%s: computed capacity equals DynamoDB Local's", name)
		assert.Positive(t, p.WriterUnits, name)
		if i > 0 {
			assert.Positive(t, p.StampBytes, "%s: the stamp adds bytes to each transaction", name)
		}
		if i > 1 {
			prev := res.Periods[i-1]
			assert.Greater(t, len(p.Types), len(prev.Types))
			assert.Greater(t, p.Reports, prev.Reports, "%s: more types, more reports", name)
			assert.Greater(t, p.AggregationUnits(), prev.AggregationUnits(), "%s: more types, more write units", name)
		}
	}
	require.Len(t, res.Rebucket, 1)
	rb := res.Rebucket[0]
	assert.Equal(t, cfg.RebucketTransactions, rb.Result.Transactions)
	assert.Equal(t, cfg.RebucketTransactions, rb.Result.Moved, "every transaction leaves 3 types for 7")
	assert.Equal(t, float64(rb.Cost.Units), rb.Result.WriteUnits, "the meter bills the rebucket's writes as DynamoDB Local reports them")
	assert.Equal(t, float64(rb.ConsumerCost.LocalUnits), rb.ConsumerCost.Reported, "the poller's commits of the moves")
	assert.Positive(t, rb.ConsumerCost.Units)
	assert.Positive(t, rb.PerSecond())
	assert.Zero(t, rb.Diffs, "reports exact after the moves")
	assert.Zero(t, rb.Unsettled, "every transaction in its current calendar")
	assert.Zero(t, rb.Again.Moved, "a second run moves nothing")
}
