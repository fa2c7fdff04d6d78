package processor_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Tenant roll-ups (docs/exactly-once.md, "Tenant roll-ups"): the tests
// compare what the table holds, Σ partials + unfolded roll-up delta items +
// parked roll-up shares, with an oracle folded from the live transactions
// by tenant, currency and period, and branches with the number of branch
// reports whose count is not zero.

type rollupCell struct {
	tenant, currency string
	period           aggregates.Period
}

func (c rollupCell) String() string { return c.tenant + "/" + c.currency + "/" + c.period.String() }

// rtx is one transaction of a roll-up test.
type rtx struct {
	tenant, branch, currency, day, id, typ, amount, category string
}

// put writes tx as the writer does: stamped with its business date (the
// UTC day, or businessDay when set) and its branch's currency.
func (tx rtx) put(t *testing.T, e *env, businessDay string) aggregates.Key {
	t.Helper()
	if businessDay == "" {
		businessDay = tx.day
	}
	bd, err := aggregates.ParseDate(businessDay)
	require.NoError(t, err)
	st := aggregates.LegacyStamp(bd)
	k := aggregates.Key{PK: aggregates.TransactionPK(tx.tenant, tx.branch), SK: tx.day + "#" + tx.id}
	typ := tx.typ
	if typ == "" {
		typ = "INCOME"
	}
	item := map[string]ddbtypes.AttributeValue{
		"PK": sAV(k.PK), "SK": sAV(k.SK), "entityType": sAV(aggregates.EntityTransaction),
		"type": sAV(typ), "amount": nAV(tx.amount), "category": sAV(tx.category),
		"createdAt": sAV(tx.day + "T12:00:00Z"), aggregates.AttrBusinessDate: sAV(businessDay),
		aggregates.AttrPeriods: sAV(st.EncodePeriods()),
	}
	if tx.currency != "" {
		item[aggregates.AttrCurrency] = sAV(tx.currency)
	}
	_, err = e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &e.table, Item: item})
	require.NoError(t, err)
	return k
}

func scanAll(t *testing.T, e *env) []map[string]ddbtypes.AttributeValue {
	t.Helper()
	var out []map[string]ddbtypes.AttributeValue
	p := dynamodb.NewScanPaginator(e.ddb, &dynamodb.ScanInput{TableName: &e.table, ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		require.NoError(t, err)
		out = append(out, page.Items...)
	}
	return out
}

// expectedRollups folds the table's valid transactions by tenant, currency
// and period, and counts branches from the stored branch reports (count ≠
// 0, by the currency each report records).
func expectedRollups(t *testing.T, e *env) map[rollupCell]*aggregates.RollupDelta {
	t.Helper()
	want := map[rollupCell]*aggregates.RollupDelta{}
	cell := func(c rollupCell) *aggregates.RollupDelta {
		if want[c] == nil {
			want[c] = &aggregates.RollupDelta{}
		}
		return want[c]
	}
	for _, item := range scanAll(t, e) {
		pk, _ := table.String(item, table.AttrPK)
		switch {
		case aggregates.IsTransactionKey(pk):
			tx, err := table.ParseTransaction(item)
			if err != nil {
				continue
			}
			names := [3]string{}
			for _, d := range aggregates.Dimensions {
				names[d] = tx.Breakdown(d)
			}
			for _, p := range tx.Stamp.Periods {
				cell(rollupCell{tx.Tenant, aggregates.RollupCurrency(tx.Currency), p}).Add(aggregates.Contribution(tx), names)
			}
		default:
			tenant, _, ok := aggregates.ParseReportPK(pk)
			ref, err := aggregates.ParseReportItemKey(table.KeyOf(item))
			if !ok || err != nil || ref.Kind != aggregates.ReportHeader {
				continue
			}
			if n, _ := table.HeadCount(item); n != 0 {
				cur, _ := table.String(item, table.AttrCurrency)
				cell(rollupCell{tenant, cur, ref.Report.Period}).Branches++
			}
		}
	}
	return want
}

// storedRollup is what the table holds of the roll-ups.
type storedRollup struct {
	sum                    map[rollupCell]*aggregates.RollupDelta
	partials, lane, parked int // items of each kind
	deltaKeys              []aggregates.Key
}

func readRollups(t *testing.T, e *env) storedRollup {
	t.Helper()
	s := storedRollup{sum: map[rollupCell]*aggregates.RollupDelta{}}
	add := func(c rollupCell, d *aggregates.RollupDelta) {
		if s.sum[c] == nil {
			s.sum[c] = &aggregates.RollupDelta{}
		}
		s.sum[c].Merge(d)
	}
	set := table.ReportSet{}
	for _, item := range scanAll(t, e) {
		k := table.KeyOf(item)
		switch {
		case aggregates.IsRollupLaneKey(k.PK):
			d, err := table.DecodeRollupDelta(item)
			require.NoError(t, err)
			s.lane++
			s.deltaKeys = append(s.deltaKeys, k)
			for p, pd := range d.Periods {
				add(rollupCell{d.Tenant, d.Currency, p}, pd)
			}
		case aggregates.IsRollupPK(k.PK):
			require.NoError(t, set.Add(item))
		default:
			ref, err := aggregates.ParseReportItemKey(k)
			if err != nil || ref.Kind != aggregates.ReportParked {
				continue
			}
			if cur, ok := table.RollupShare(item); ok {
				r, _, err := table.DecodeParked(item)
				require.NoError(t, err)
				s.parked++
				add(rollupCell{ref.Report.Tenant, cur, ref.Report.Period}, &aggregates.RollupDelta{Report: *r})
			}
		}
	}
	for k, sr := range set {
		rk, ok := k.Rollup()
		require.True(t, ok)
		if sr.Item != nil {
			s.partials++
		}
		for _, pitem := range sr.Parked {
			r, _, err := table.DecodeParked(pitem)
			require.NoError(t, err)
			b, err := table.ParkedBranches(pitem)
			require.NoError(t, err)
			s.parked++
			add(rollupCell{rk.Tenant, rk.Currency, rk.Period}, &aggregates.RollupDelta{Report: *r, Branches: b})
		}
		d, problems := sr.DecodeRollup()
		require.Empty(t, problems, "partial %s", k)
		add(rollupCell{rk.Tenant, rk.Currency, rk.Period}, d)
	}
	return s
}

// requireRollupsExact compares what the table holds with the oracle:
// figures always, branches when branches is set.
func requireRollupsExact(t *testing.T, e *env, branches bool) storedRollup {
	t.Helper()
	want, got := expectedRollups(t, e), readRollups(t, e)
	cells := map[rollupCell]bool{}
	for c := range want {
		cells[c] = true
	}
	for c := range got.sum {
		cells[c] = true
	}
	for c := range cells {
		w, g := want[c], got.sum[c]
		if w == nil {
			w = &aggregates.RollupDelta{}
		}
		if g == nil {
			g = &aggregates.RollupDelta{}
		}
		for _, d := range g.Diff(&w.Report) {
			t.Errorf("roll-up %s: %s", c, d)
		}
		if branches && g.Branches != w.Branches {
			t.Errorf("roll-up %s: branches: got %d; want %d", c, g.Branches, w.Branches)
		}
	}
	return got
}

// consumer processes a table's whole stream with one guard kind.
type consumer struct {
	t    *testing.T
	e    *env
	p    *processor.Processor
	mode string // "batch", "runs" (a shard guard committing runs) or "marker"
	g    processor.Guard
	// delivered: the records a marker-mode consumer was handed (by
	// eventID); its passes hand over the others, in stream order, as an
	// event source mapping hands each record over once.
	delivered map[string]bool
}

func newConsumer(t *testing.T, e *env, mode string, reg prometheus.Registerer, cfg processor.Config) *consumer {
	t.Helper()
	cfg.Table, cfg.BaseBackoff, cfg.MaxBackoff = e.table, time.Millisecond, 20*time.Millisecond
	p, err := processor.New(e.ddb, cfg, processor.NewMetrics(reg))
	require.NoError(t, err)
	c := &consumer{t: t, e: e, p: p, mode: mode, delivered: map[string]bool{}}
	c.g = p.MarkerGuard()
	if mode != "marker" {
		sg := p.ShardGuard(e.streamARN, shardOf(t, e))
		if mode == "batch" {
			sg.CommitBatches()
		}
		c.g = sg
	}
	return c
}

// pass processes the records of the stream so far: all of them once more
// for a shard guard (which skips what is committed), the ones not handed
// over yet for a marker guard. It returns the result.
func (c *consumer) pass() processor.Result {
	c.t.Helper()
	_, recs := c.e.records(c.t)
	if c.mode == "marker" {
		var fresh []processor.Record
		for _, r := range recs {
			if !c.delivered[r.EventID] {
				fresh = append(fresh, r)
			}
		}
		recs = fresh
	}
	return c.deliver(recs...)
}

// deliver processes recs (a marker-mode consumer then never hands them over
// again).
func (c *consumer) deliver(recs ...processor.Record) processor.Result {
	c.t.Helper()
	if len(recs) == 0 {
		return processor.Result{}
	}
	res, err := c.p.Process(context.Background(), c.g, recs)
	require.NoError(c.t, err)
	for _, r := range recs {
		c.delivered[r.EventID] = true
	}
	return res
}

// drain passes until no roll-up delta item is left unfolded.
func (c *consumer) drain() {
	c.t.Helper()
	for i := 0; ; i++ {
		c.pass()
		st := readRollups(c.t, c.e)
		if st.lane == 0 {
			return
		}
		require.Less(c.t, i, 5, "roll-up deltas still unfolded after 5 passes: %v", st.deltaKeys)
	}
}

var rollupModes = []string{"batch", "runs", "marker"}

// TestCommit_RollupDeltaEqualsTheSumOfItsParts: the roll-up delta items a
// commit puts hold exactly the sum of its branch-report parts by tenant,
// currency and period (stage 1), and folding them leaves nothing in the
// lanes and partials equal to the sum (stage 2), for several currencies, no
// currency, a delta cut past E_d entries, and a part parked with its
// roll-up share.
func TestCommit_RollupDeltaEqualsTheSumOfItsParts(t *testing.T) {
	tests := []struct {
		name    string
		txs     func() []rtx
		damage  func(t *testing.T, e *env) // before the first pass
		bounded bool                       // check every delta item's bounds
		parked  bool
	}{
		{name: "several currencies and tenants", txs: func() []rtx {
			return []rtx{
				{"acme", "sp", "BRL", "2026-11-27", "1", "INCOME", "10.50", "food"},
				{"acme", "sp", "BRL", "2026-11-27", "2", "EXPENSE", "3", "rent"},
				{"acme", "rio", "BRL", "2026-11-27", "3", "INCOME", "1.25", "food"},
				{"acme", "paris", "EUR", "2026-11-27", "4", "INCOME", "7", "food"},
				{"acme", "paris", "EUR", "2026-11-28", "5", "EXPENSE", "2", "wine"},
				{"beta", "tokyo", "JPY", "2026-11-27", "6", "INCOME", "500", "food"},
			}
		}},
		{name: "no currency", txs: func() []rtx {
			return []rtx{
				{"acme", "old", "", "2026-11-27", "1", "INCOME", "4", "food"},
				{"acme", "older", "", "2026-11-27", "2", "INCOME", "6", "tea"},
				{"acme", "sp", "BRL", "2026-11-27", "3", "INCOME", "1", "food"},
			}
		}},
		{name: "many names and days", bounded: true, txs: func() []rtx {
			// 300 names over 75 days: a batch's groups hold many periods
			// and names, each delta item within E_d entries, 32 periods
			// and 32 entries a period (DecodeRollupDelta refuses more).
			var txs []rtx
			for i := range 300 {
				day := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i%75).Format("2006-01-02")
				txs = append(txs, rtx{"acme", fmt.Sprint("b", i%3), "BRL", day, fmt.Sprint(i), "INCOME", "1", fmt.Sprintf("cat-%03d", i)})
			}
			return txs
		}},
		{name: "a parked part", parked: true, txs: func() []rtx {
			return []rtx{
				{"acme", "sp", "BRL", "2026-11-27", "1", "INCOME", "10", "food"},
				{"acme", "rio", "BRL", "2026-11-27", "2", "INCOME", "5", "food"},
			}
		}, damage: func(t *testing.T, e *env) {
			// rio's daily report item damaged: its update is refused.
			k := aggregates.ReportKey{Tenant: "acme", Branch: "rio", Period: aggregates.Period{Type: aggregates.Daily, Value: "2026-11-27"}}.Key()
			_, err := e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]ddbtypes.AttributeValue{
				"PK": sAV(k.PK), "SK": sAV(k.SK), "entityType": sAV(aggregates.EntityReport), table.AttrTotalIncome: sAV("oops"),
			}})
			require.NoError(t, err)
		}},
	}
	for _, tt := range tests {
		for _, mode := range rollupModes {
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				e := newEnv(t)
				for _, tx := range tt.txs() {
					tx.put(t, e, "")
				}
				if tt.damage != nil {
					tt.damage(t, e)
				}
				c := newConsumer(t, e, mode, nil, processor.Config{})
				// Stage 1 only: the transactions' commits put the deltas.
				_, recs := e.records(t)
				_, err := c.p.Process(context.Background(), c.g, recs)
				require.NoError(t, err)
				st := requireRollupsExact(t, e, false)
				assert.Positive(t, st.lane, "the commits put roll-up delta items")
				assert.Zero(t, st.partials, "nothing folded yet")
				if tt.bounded {
					assert.Greater(t, len(st.deltaKeys), 1)
				}
				if tt.parked && mode == "batch" {
					// Plan layout 6 ("Parking"): the share stays in the
					// batch delta, the parked item carries none.
					assert.Zero(t, st.parked, "a batch's parked part keeps its roll-up share in the batch delta")
				} else if tt.parked {
					assert.Equal(t, 1, st.parked, "the parked part's roll-up share is parked with it")
				}
				// Stage 2: the lane records fold the deltas into partials.
				c.drain()
				st = requireRollupsExact(t, e, true)
				assert.Zero(t, st.lane, "every delta item is deleted by its fold")
				assert.Positive(t, st.partials)
			})
		}
	}
}

// txnRecords returns the stream's records of transaction items of tenant
// and branch (every event), in order.
func txnRecords(t *testing.T, e *env, tenant, branch string) []processor.Record {
	t.Helper()
	_, recs := e.records(t)
	var out []processor.Record
	for _, r := range recs {
		if pk, _ := table.String(r.Keys, table.AttrPK); pk == aggregates.TransactionPK(tenant, branch) {
			out = append(out, r)
		}
	}
	return out
}

func day(v string) aggregates.Period { return aggregates.Period{Type: aggregates.Daily, Value: v} }

// branchesOf is the roll-up's branch count of a cell as the table holds it.
func branchesOf(t *testing.T, e *env, c rollupCell) int64 {
	t.Helper()
	if d := readRollups(t, e).sum[c]; d != nil {
		return d.Branches
	}
	return 0
}

// TestCommit_StaleBranchCountIsAShapeConflict: a consumer whose cached
// count of a branch report is stale (another consumer committed to the
// report since) sends it as the condition of the update that moves the
// count: the transaction is cancelled, the shape read again, and the
// branch transition computed on the count that lands.
func TestCommit_StaleBranchCountIsAShapeConflict(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	p1 := newConsumer(t, e, "marker", reg, processor.Config{})
	p2 := newConsumer(t, e, "marker", nil, processor.Config{})
	tx1 := rtx{"acme", "sp", "BRL", "2026-11-27", "1", "INCOME", "10", "food"}
	k1 := tx1.put(t, e, "")
	p1.deliver(txnRecords(t, e, "acme", "sp")[0]) // count 0 → 1, cached by p1
	rtx{"acme", "sp", "BRL", "2026-11-27", "2", "INCOME", "5", "food"}.put(t, e, "")
	r2 := txnRecords(t, e, "acme", "sp")[1]
	p2.deliver(r2) // 1 → 2: p1's count is stale
	p1.delivered[r2.EventID] = true
	_, err := e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.table, Key: table.Key(k1)})
	require.NoError(t, err)
	p1.deliver(txnRecords(t, e, "acme", "sp")[2]) // 2 → 1, p1 believes 1 → 0
	assert.Equal(t, 1.0, testutil.ToFloat64(p1.p.Metrics().Conflicts.WithLabelValues(processor.ConflictConditionFailed)),
		"the stale count cancels once")
	p1.drain()
	requireRollupsExact(t, e, true)
	assert.Equal(t, int64(1), branchesOf(t, e, rollupCell{"acme", "BRL", day("2026-11-27")}), "one branch report with a count")
}

// TestCommit_CountBackToZeroThenANewTransaction (review hole 1): a count
// an ADD brought back to 0 is 0, not absent; the next transaction's
// condition for c = 0 accepts both, so it lands (not a stuck shard, not a
// parked part) and the branch counts again.
func TestCommit_CountBackToZeroThenANewTransaction(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		t.Run(fmt.Sprintf("shape read from the table=%v", fresh), func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			c := newConsumer(t, e, "marker", nil, processor.Config{})
			k := rtx{"acme", "sp", "BRL", "2026-11-27", "1", "INCOME", "10", "food"}.put(t, e, "")
			_, err := e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.table, Key: table.Key(k)})
			require.NoError(t, err)
			for _, r := range txnRecords(t, e, "acme", "sp") { // 0 → 1 → 0
				c.deliver(r)
			}
			rtx{"acme", "sp", "BRL", "2026-11-27", "2", "INCOME", "4", "food"}.put(t, e, "")
			if fresh {
				d := c.delivered
				c = newConsumer(t, e, "marker", nil, processor.Config{})
				c.delivered = d
			}
			c.deliver(txnRecords(t, e, "acme", "sp")[2]) // 0 → 1
			c.drain()
			diffs, _, err := reconcileBranch(ctx, e, "acme", "sp")
			require.NoError(t, err)
			assert.Empty(t, diffs, "the branch reports are exact")
			st := requireRollupsExact(t, e, true)
			assert.Zero(t, st.parked, "nothing parked")
			assert.Equal(t, int64(1), branchesOf(t, e, rollupCell{"acme", "BRL", day("2026-11-27")}))
		})
	}
}

// TestCommit_DamagedBranchCountParks (review hole 2): a report whose count
// another writer made a string can never pass the count condition: its
// part 0 is parked as malformed, with its roll-up share, before it is
// sent, and the commit goes on.
func TestCommit_DamagedBranchCountParks(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	rtx{"acme", "sp", "BRL", "2026-11-27", "1", "INCOME", "10", "food"}.put(t, e, "")
	c := newConsumer(t, e, "marker", nil, processor.Config{})
	c.pass()
	rk := aggregates.ReportKey{Tenant: "acme", Branch: "sp", Period: day("2026-11-27")}.Key()
	_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table, Key: table.Key(rk),
		UpdateExpression:          aws.String("SET transactionCount = :s"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":s": sAV("one")}})
	require.NoError(t, err)
	rtx{"acme", "sp", "BRL", "2026-11-27", "2", "INCOME", "5", "food"}.put(t, e, "")
	d := c.delivered
	c = newConsumer(t, e, "marker", reg, processor.Config{})
	c.delivered = d
	c.deliver(txnRecords(t, e, "acme", "sp")[1]) // parked, not retried for ever
	assert.Equal(t, 1.0, testutil.ToFloat64(c.p.Metrics().Parked.WithLabelValues(processor.ParkedMalformed)))
	st := readRollups(t, e)
	assert.Equal(t, 1, st.parked, "the daily part parked with its roll-up share")
	requireRollupsExact(t, e, false)
}

// TestCommit_BranchCountFollowsDeletesAndMoves: a branch whose only
// transaction of a day is deleted, and one whose only transaction is moved
// to another business day by an edit, stop counting in that day's roll-up
// (and the moved one counts in the next day's).
func TestCommit_BranchCountFollowsDeletesAndMoves(t *testing.T) {
	for _, mode := range []string{"batch", "marker"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			c := newConsumer(t, e, mode, nil, processor.Config{})
			gone := rtx{"acme", "sp", "BRL", "2026-11-27", "1", "INCOME", "10", "food"}.put(t, e, "")
			moved := rtx{"acme", "rio", "BRL", "2026-11-27", "2", "EXPENSE", "3", "rent"}
			moved.put(t, e, "")
			c.drain()
			d27, d28 := rollupCell{"acme", "BRL", day("2026-11-27")}, rollupCell{"acme", "BRL", day("2026-11-28")}
			require.Equal(t, int64(2), branchesOf(t, e, d27))

			_, err := e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.table, Key: table.Key(gone)})
			require.NoError(t, err)
			moved.put(t, e, "2026-11-28") // the same item, another business day: a MODIFY
			c.drain()
			requireRollupsExact(t, e, true)
			assert.Zero(t, branchesOf(t, e, d27), "no branch has a transaction on the 27th")
			assert.Equal(t, int64(1), branchesOf(t, e, d28))
			assert.Equal(t, int64(1), branchesOf(t, e, rollupCell{"acme", "BRL", aggregates.Period{Type: aggregates.Monthly, Value: "2026-11"}}))
		})
	}
}

// TestProcess_RollupLaneModifyAndRemoveAreIgnored: a lane key's INSERT is
// folded (as it was put, whatever happens to the item after), its MODIFY
// and REMOVE records (an edit by another path; the delete of the fold)
// contribute nothing, and each is counted.
func TestProcess_RollupLaneModifyAndRemoveAreIgnored(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	delta := &aggregates.RollupDelta{Branches: 1}
	delta.Add(aggregates.Totals{Income: decimal.RequireFromString("7.5"), Count: 2}, [3]string{"food", "", ""})
	key := aggregates.RollupDeltaKey("acme", 5, "by-hand", "EUR", 0)
	item := table.EncodeRollupDelta(key, "EUR", map[aggregates.Period]*aggregates.RollupDelta{day("2026-11-27"): delta}, "2026-11-27T10:00:00Z")
	_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: item})
	require.NoError(t, err)
	_, err = e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table, Key: table.Key(key),
		UpdateExpression: aws.String("SET updatedAt = :u"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":u": sAV("later")}})
	require.NoError(t, err)
	c := newConsumer(t, e, "batch", reg, processor.Config{})
	res := c.pass()
	assert.Equal(t, 1, res.Rollups, "the INSERT is folded")
	c.pass() // the fold's own writes come back: the REMOVE of the delta among them
	st := readRollups(t, e)
	assert.Zero(t, st.lane, "folded and deleted")
	want := rollupCell{"acme", "EUR", day("2026-11-27")}
	require.NotNil(t, st.sum[want])
	assert.Equal(t, "income=7.5 expense=0 count=2", st.sum[want].Totals.String(), "the INSERT's figures, once")
	assert.Equal(t, int64(1), st.sum[want].Branches)
	assert.Len(t, st.sum[want].Breakdowns[aggregates.ByCategory], 1)
	records := c.p.Metrics().Records
	assert.Equal(t, 1.0, testutil.ToFloat64(records.WithLabelValues("INSERT", processor.OutcomeRollup)))
	assert.GreaterOrEqual(t, testutil.ToFloat64(records.WithLabelValues("MODIFY", processor.OutcomeIgnored)), 1.0, "the lane MODIFY")
	assert.Positive(t, testutil.ToFloat64(records.WithLabelValues("REMOVE", processor.OutcomeIgnored)), "the REMOVE of the folded delta")
}

// TestCommitShardRange_DeltaInsertsAtTheEndAreFolded: the tumbling-window
// commit moves the checkpoint over the records without effect at the end
// of its range; a roll-up delta's INSERT has an effect (it is folded), so
// a window that ends with delta INSERTs folds them.
func TestCommitShardRange_DeltaInsertsAtTheEndAreFolded(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	rtx{"acme", "sp", "BRL", "2026-11-27", "1", "INCOME", "10", "food"}.put(t, e, "")
	c := newConsumer(t, e, "batch", nil, processor.Config{})
	c.pass() // stage 1: the delta item is put; its INSERT ends the stream
	shard, recs := e.records(t)
	last := recs[len(recs)-1]
	pk, _ := table.String(last.Keys, table.AttrPK)
	require.True(t, aggregates.IsRollupLaneKey(pk), "the stream ends with the delta's INSERT (and the report writes before it)")
	res, err := c.p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[0].SequenceNumber, Last: last.SequenceNumber}, 1000)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Rollups)
	st := requireRollupsExact(t, e, true)
	assert.Zero(t, st.lane)
	assert.Positive(t, st.partials)
}

// TestBatch_ResumerPutsTheSameRollupDeltas: a batch whose commit dies
// after some of its groups (the answer of the last one lost) is finished
// by another consumer with other limits, from the plan stored with the
// pending batch: the delta items of the groups that landed and of the
// resumer's sum exactly to the parts, none twice, none missing.
func TestBatch_ResumerPutsTheSameRollupDeltas(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	curs := []string{"BRL", "EUR", ""}
	for i := range 90 {
		rtx{"acme", fmt.Sprint("b", i%5), curs[i%5%3], fmt.Sprintf("2026-11-%02d", 1+i%9), fmt.Sprint(i), "INCOME", "1.5", fmt.Sprint("cat", i%7)}.put(t, e, "")
	}
	_, recs := e.records(t)
	var writes atomic.Int64
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op != "TransactWriteItems" {
			return ledgertest.Pass
		}
		switch n := writes.Add(1); {
		case n < 4:
			return ledgertest.Pass
		case n == 4:
			return ledgertest.LoseAnswer // it lands; the process dies before it learns so
		}
		return ledgertest.Drop
	}
	p, err := processor.New(e.faulty, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		MaxItemsPerRun: 12, MaxEntriesPerItem: 2, MaxAttempts: 2}, nil)
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shardOf(t, e))
	g.CommitBatches()
	_, err = p.Process(ctx, g, recs)
	require.Error(t, err, "the first consumer dies mid-batch")
	require.True(t, g.Pending(), "a half-committed batch is left")
	landed := readRollups(t, e).lane
	require.Positive(t, landed)

	c := newConsumer(t, e, "batch", nil, processor.Config{}) // default limits: the stored plan rules
	res := c.deliver(recs...)
	assert.Positive(t, res.Runs, "the resumer commits the batch's other groups")
	assert.Zero(t, res.Quarantined)
	e.requireReconciled(t)
	st := requireRollupsExact(t, e, true)
	assert.Greater(t, st.lane, landed)
}
