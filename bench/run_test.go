package bench

import (
	"context"
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
	md := res.String()
	for _, want := range []string{"### Backlog", "### Lag", "### CPU", "### Targets", "| b | 4 ledger: poller | 1000 |", "| b | 4 ledger: poller | 10000 |", "| b | 4 ledger: Lambda handler (tumbling) | 1000 |", "DynamoDB Local's own item-write rate in this run", "commits a window when it closes", "| e | 4 ledger: poller | 1000 |", "### Report item sizes", "Beyond the targets' batch size"} {
		assert.True(t, strings.Contains(md, want), "markdown has %q", want)
	}
}

// `ledgerbench -skip backlogs,lag,cpu -backlog N -reconcile-parallel 1`:
// the memory measurement alone (the poller binary's drain, then
// `ledgerctl reconcile --parallel 1` over the drained table), on a small
// backlog.
func TestMemoryAlone_SkipsTheOtherMeasurements(t *testing.T) {
	cfg := Quick()
	cfg.SkipBacklogs, cfg.SkipLag, cfg.SkipCPU = true, true, true
	cfg.Backlog, cfg.ReconcileParallel = 2000, 1
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Empty(t, res.Rows)
	assert.Empty(t, res.Lag)
	assert.Empty(t, res.CPU)
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
