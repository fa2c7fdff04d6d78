package processor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
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
			if n, _ := table.Int64(item, table.AttrTransactionCount); n != 0 {
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
			s.parked++
			add(rollupCell{rk.Tenant, rk.Currency, rk.Period}, &aggregates.RollupDelta{Report: *r})
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
}

func newConsumer(t *testing.T, e *env, mode string, reg prometheus.Registerer, cfg processor.Config) *consumer {
	t.Helper()
	cfg.Table, cfg.BaseBackoff, cfg.MaxBackoff = e.table, time.Millisecond, 20*time.Millisecond
	p, err := processor.New(e.ddb, cfg, processor.NewMetrics(reg))
	require.NoError(t, err)
	c := &consumer{t: t, e: e, p: p, mode: mode}
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

// pass processes every record of the stream so far once more (the guard
// skips what is committed) and returns the result.
func (c *consumer) pass() processor.Result {
	c.t.Helper()
	_, recs := c.e.records(c.t)
	res, err := c.p.Process(context.Background(), c.g, recs)
	require.NoError(c.t, err)
	return res
}

// drain passes until no roll-up delta item is left unfolded.
func (c *consumer) drain() {
	c.t.Helper()
	for i := 0; ; i++ {
		c.pass()
		if readRollups(c.t, c.e).lane == 0 {
			return
		}
		require.Less(c.t, i, 5, "roll-up deltas still unfolded after 5 passes")
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
			// and names, each delta item within E_d entries and 64
			// periods (DecodeRollupDelta refuses more).
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
					// A commit writes at most 99 items, one per entry of its
					// parts: its delta for a tenant and currency holds at
					// most about 3 × 99 entries and periods, so the cut at
					// E_d and 64 periods (n > 0, table's tests) is rare.
					assert.Greater(t, len(st.deltaKeys), 1)
				}
				if tt.parked {
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
