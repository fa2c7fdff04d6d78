package processor

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

var updatePlan6 = flag.Bool("update-plan6", false, "rewrite testdata/plan6/*.txt from the planner")

// plan6Batch is a batch for the planner tests: its records in order.
type plan6Batch []Record

// txn6 is one record of tenant t: an INSERT (old empty), a MODIFY or a
// REMOVE (new empty) of a transaction of branch br in currency cur.
type txn6 struct {
	op                     string // INSERT, MODIFY, REMOVE
	br, cur, date, id, typ string
	amount, category       string
	newAmount, newCategory string // a MODIFY's new figures
	invalid                bool   // no category: quarantined
	tenantOverride         string // another tenant than "t"
}

func (b *plan6Batch) add(tx txn6) {
	tenant := "t"
	if tx.tenantOverride != "" {
		tenant = tx.tenantOverride
	}
	img := func(amount, category string) map[string]ddbtypes.AttributeValue {
		m := txnImage(tx.br, tx.date, tx.id, tx.typ, amount, category)
		m["PK"] = table.S(aggregates.TransactionPK(tenant, tx.br))
		if tx.cur != "" {
			m[aggregates.AttrCurrency] = table.S(tx.cur)
		}
		return m
	}
	cat := tx.category
	if tx.invalid {
		cat = ""
	}
	seq := fmt.Sprintf("%06d", len(*b)+1)
	r := Record{EventName: tx.op, SequenceNumber: seq, EventID: "ev" + seq}
	switch tx.op {
	case "INSERT":
		r.NewImage = img(tx.amount, cat)
		r.Keys = keysOf(r.NewImage)
	case "MODIFY":
		r.OldImage, r.NewImage = img(tx.amount, cat), img(tx.newAmount, tx.newCategory)
		r.Keys = keysOf(r.NewImage)
	case "REMOVE":
		r.OldImage = img(tx.amount, cat)
		r.Keys = keysOf(r.OldImage)
	}
	*b = append(*b, r)
}

// addLane adds the INSERT of another batch's roll-up delta item (a lane
// record): the batch folds it into partials (partial parts) and deletes
// it (a fold).
func (b *plan6Batch) addLane(rng *rand.Rand, cur, date, name string) {
	per, err := aggregates.ParsePeriodKey("DAILY#" + date)
	if err != nil {
		panic(err)
	}
	d := &aggregates.RollupDelta{Branches: int64(rng.IntN(3))}
	d.Add(aggregates.Totals{Income: decimal.NewFromInt(int64(1 + rng.IntN(9))), Count: 1}, [3]string{name})
	seq := fmt.Sprintf("%06d", len(*b)+1)
	claim := "other~" + seq + "~g0"
	img := table.EncodeRollupDelta(aggregates.RollupDeltaKey("t", aggregates.RollupLane(claim), claim, cur, 0), cur,
		map[aggregates.Period]*aggregates.RollupDelta{per: d}, "2024-01-02T00:00:00Z")
	*b = append(*b, Record{EventName: "INSERT", SequenceNumber: seq, EventID: "ev" + seq, Keys: table.Key(table.KeyOf(img)), NewImage: img})
}

// plan6For plans recs as a consumer would: classified, deduplicated,
// folded.
func plan6For(recs []Record, items, entries, lanes int, opts plan6Options) (*plan6, []change) {
	changes := make([]change, len(recs))
	for i := range recs {
		changes[i] = classify(&recs[i])
	}
	dedupe(changes)
	quarantineForeignCurrency(changes)
	if lanes == 0 {
		for i := range changes {
			changes[i].rollup = nil // roll-ups off: no delta record folded
		}
	}
	fold := aggregates.NewFold()
	for i := range changes {
		changes[i].addTo(fold)
	}
	var folds []*change
	if lanes > 0 {
		folds = foldingChanges(changes)
	}
	plan := batchPlan{items: items, entries: entries, layout: plan6Layout, lanes: lanes}
	to := recs[len(recs)-1].SequenceNumber
	return planBatch6(batch6{label: "L", shard: "shard-0", to: to}, changes, fold, needingQuarantine(changes), folds, plan, opts), changes
}

// render prints a plan group by group, for the golden files.
func (p *plan6) render() string {
	var sb strings.Builder
	b := p.batch
	fmt.Fprintf(&sb, "plan %s, %d groups, digest %s\n", p.plan, len(p.groups), p.digest())
	for s := range p.items {
		it := &p.items[s]
		k := it.key(b)
		fmt.Fprintf(&sb, "item s%d %s %s (lane %s): eligible %d, placed %d", s, it.rg.Tenant, k.SK, strings.TrimPrefix(k.PK, "TENANT#"+it.rg.Tenant+"#"), it.eligible, it.placed)
		if it.staged {
			fmt.Fprintf(&sb, ", staged %d…%d", it.kfirst, it.klast)
		}
		fmt.Fprintln(&sb)
		for _, per := range aggregates.SortedPeriods(it.periods) {
			d := it.periods[per]
			fmt.Fprintf(&sb, "  %s: income %s expense %s count %d", per, d.Income, d.Expense, d.Count)
			for _, dim := range aggregates.Dimensions {
				for _, name := range slices.Sorted(maps.Keys(d.Breakdowns[dim])) {
					fmt.Fprintf(&sb, " %s=%s/%s", name, d.Breakdowns[dim][name].Income, d.Breakdowns[dim][name].Expense)
				}
			}
			fmt.Fprintln(&sb)
		}
	}
	for k := range p.groups {
		g := &p.groups[k]
		fmt.Fprintf(&sb, "group %d: %d writes planned, %d actions\n", k, g.writes(), p.actions(k))
		for _, pt := range g.parts {
			fmt.Fprintf(&sb, "  part %s/%s %s count %d entries %d first %t\n", pt.key.Tenant, pt.key.Branch, pt.key.Period, pt.delta.Count, pt.delta.Entries(), pt.first)
		}
		for _, a := range g.applied {
			fmt.Fprintf(&sb, "  applied %s/%s %s %d/%d/%d/%d\n", a.count.Tenant, a.count.Branch, a.kind, a.count.Applied, a.count.Probed, a.count.Foreign, a.count.Compacted)
		}
		for _, st := range g.staging {
			verb := "update"
			if st.put {
				verb = "put"
			}
			var pers []string
			for _, per := range st.periods {
				pers = append(pers, per.String())
			}
			fmt.Fprintf(&sb, "  staging %s s%d %s [%s]\n", verb, st.item, p.items[st.item].stagingSK(b), strings.Join(pers, " "))
		}
		for _, s := range g.puts {
			fmt.Fprintf(&sb, "  put s%d\n", s)
		}
		for _, s := range g.deletes {
			fmt.Fprintf(&sb, "  delete staging s%d (lastGroup %d)\n", s, p.items[s].klast)
		}
		for _, c := range g.folds {
			fmt.Fprintf(&sb, "  fold %s\n", recordID(c.rec))
		}
		for _, c := range g.quarantine {
			fmt.Fprintf(&sb, "  quarantine %s\n", recordID(c.rec))
		}
	}
	return sb.String()
}

// plan6Case is a hand-checked batch of the golden files, with its m and e.
type plan6Case struct {
	name           string
	recs           plan6Batch
	items, entries int
}

// plan6Cases are the hand-checked batches of the golden files.
func plan6Cases() []plan6Case {
	oneGroup := plan6Batch{}
	oneGroup.add(txn6{op: "INSERT", br: "b1", cur: "BRL", date: "2024-01-02", id: "1", typ: "INCOME", amount: "10", category: "food"})
	oneGroup.add(txn6{op: "INSERT", br: "b2", cur: "BRL", date: "2024-01-02", id: "2", typ: "EXPENSE", amount: "4", category: "rent"})
	oneGroup.add(txn6{op: "INSERT", br: "b3", cur: "EUR", date: "2024-01-03", id: "3", typ: "INCOME", amount: "7", category: "food"})

	// Eight branches, one day, 24 writes a group: several groups, the
	// day's totals staged by the groups before the last.
	several := plan6Batch{}
	for i := range 8 {
		several.add(txn6{op: "INSERT", br: fmt.Sprintf("b%d", i), cur: "BRL", date: "2024-01-02", id: fmt.Sprint(i), typ: "INCOME", amount: "1", category: fmt.Sprintf("c%d", i%3)})
	}

	// One branch whose day report has more than e = 2 entries: part 1 is
	// in the part-index-1 groups, after every part 0, so the branch is
	// open from its first group to its last.
	across := plan6Batch{}
	for i, cat := range []string{"a", "b", "c", "d"} {
		across.add(txn6{op: "INSERT", br: "b1", cur: "EUR", date: "2024-01-02", id: fmt.Sprint(i), typ: "INCOME", amount: "1", category: cat})
	}
	for i := range 4 {
		across.add(txn6{op: "INSERT", br: fmt.Sprintf("b%d", i+2), cur: "EUR", date: "2024-01-02", id: fmt.Sprint(10 + i), typ: "EXPENSE", amount: "2", category: "a"})
	}

	// A create in one branch and the delete of an equal amount in
	// another: the day's figures sum to zero, and two branches cross zero.
	zero := plan6Batch{}
	zero.add(txn6{op: "INSERT", br: "b1", cur: "BRL", date: "2024-01-02", id: "1", typ: "INCOME", amount: "5", category: "food"})
	zero.add(txn6{op: "REMOVE", br: "b2", cur: "BRL", date: "2024-01-02", id: "2", typ: "INCOME", amount: "5", category: "food"})
	zero.add(txn6{op: "INSERT", br: "b3", cur: "BRL", date: "2024-02-09", id: "3", typ: "INCOME", amount: "1", category: "x"})

	// A part that the commit may park (its report found in another
	// currency, say): the plan cannot know, so its figures are in the
	// batch delta like any other (b2's), and an invalid record is
	// quarantined, counted for its branch.
	parked := plan6Batch{}
	parked.add(txn6{op: "INSERT", br: "b1", cur: "JPY", date: "2024-01-02", id: "1", typ: "INCOME", amount: "100", category: "food"})
	parked.add(txn6{op: "INSERT", br: "b2", cur: "JPY", date: "2024-01-02", id: "2", typ: "INCOME", amount: "300", category: "food"})
	parked.add(txn6{op: "MODIFY", br: "b2", cur: "JPY", date: "2024-01-02", id: "2", typ: "INCOME", amount: "300", category: "food", newAmount: "250", newCategory: "fuel"})
	parked.add(txn6{op: "INSERT", br: "b3", cur: "JPY", date: "2024-01-02", id: "3", typ: "INCOME", amount: "1", invalid: true})
	parked.add(txn6{op: "INSERT", br: "b4", cur: "JPY", date: "2024-01-05", id: "4", typ: "EXPENSE", amount: "9", category: "food"})

	// Records that change no report (a create and its delete in one
	// batch) in four branches, m = 3: their counts alone, in groups of
	// their own.
	alone := plan6Batch{}
	for i := range 4 {
		tx := txn6{op: "INSERT", br: fmt.Sprintf("b%d", i), cur: "EUR", date: "2024-01-02", id: fmt.Sprint(i), typ: "INCOME", amount: "3", category: "a"}
		alone.add(tx)
		tx.op = "REMOVE"
		alone.add(tx)
	}

	// One report of six names with m = 5: the part alone passes m (at
	// most 2e + 3 writes), in a group of its own.
	wide := plan6Batch{}
	for i, cat := range []string{"a", "b", "c", "d", "e", "f"} {
		wide.add(txn6{op: "INSERT", br: "b1", cur: "BRL", date: "2024-01-02", id: fmt.Sprint(i), typ: "INCOME", amount: "1", category: cat})
	}
	wide.add(txn6{op: "INSERT", br: "b2", cur: "BRL", date: "2024-01-02", id: "9", typ: "INCOME", amount: "1", category: "a"})

	return []plan6Case{
		{"one-group", oneGroup, 99, 32},
		{"several-groups", several, 24, 32},
		{"branch-across-groups", across, 16, 2},
		{"period-summing-to-zero", zero, 12, 32},
		{"parked-part-keeps-its-share", parked, 14, 32},
		{"counts-alone", alone, 3, 32},
		{"part-alone-over-m", wide, 5, 32},
	}
}

// TestPlan6_Golden prints each hand-checked batch's plan group by group
// (parts, applied actions, staging writes, delta puts and staging deletes,
// folds, quarantine items) under the design, open question 9 and roll-ups
// off, against testdata/plan6 (-update-plan6 rewrites them).
func TestPlan6_Golden(t *testing.T) {
	variants := []struct {
		name  string
		lanes int
		opts  plan6Options
	}{
		{"design", aggregates.RollupLanes, plan6Options{}},
		{"branches-only", aggregates.RollupLanes, plan6Options{branchesOnly: true}},
		{"rollups-off", 0, plan6Options{}},
	}
	for _, c := range plan6Cases() {
		for _, v := range variants {
			t.Run(c.name+"/"+v.name, func(t *testing.T) {
				p, _ := plan6For(c.recs, c.items, c.entries, v.lanes, v.opts)
				checkPlan6(t, p, c.recs)
				got := p.render()
				path := filepath.Join("testdata", "plan6", c.name+"--"+v.name+".txt")
				if *updatePlan6 {
					require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
					require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
				}
				want, err := os.ReadFile(path)
				require.NoError(t, err, "run with -update-plan6 to create it")
				assert.Equal(t, string(want), got)
			})
		}
	}
}

// TestPlan6_OneGroupIsLayout4sGroupPlusItsCounts: a batch that fits one
// group plans layout 4's group (the same parts, the same delta items'
// figures, the same reserved delta room) plus one count per branch, and
// stages nothing.
func TestPlan6_OneGroupIsLayout4sGroupPlusItsCounts(t *testing.T) {
	c := plan6Cases()[0]
	p, changes := plan6For(c.recs, 99, 32, aggregates.RollupLanes, plan6Options{})
	require.Len(t, p.groups, 1)
	g := p.groups[0]
	fold := aggregates.NewFold()
	for i := range changes {
		changes[i].addTo(fold)
	}
	l4 := planGroups(fold, needingQuarantine(changes), foldingChanges(changes), batchPlan{items: 99, entries: 32, layout: rollupLayout, lanes: aggregates.RollupLanes})
	require.Len(t, l4, 1)
	assert.Equal(t, l4[0].parts, g.parts)
	assert.Empty(t, g.staging)
	assert.Empty(t, g.deletes)
	rf := rollupFold(l4[0].parts, nil)
	var want []map[aggregates.Period]*aggregates.RollupDelta
	for _, rg := range rf.Groups() {
		want = append(want, table.SplitRollupDelta(rf.Periods(rg))...)
	}
	var got []map[aggregates.Period]*aggregates.RollupDelta
	for _, s := range g.puts {
		got = append(got, p.items[s].periods)
	}
	assert.Equal(t, want, got)
	assert.Equal(t, appliedCounts(changes), countsOf(g.applied))
	branches := 3
	assert.Equal(t, l4[0].rollupItems, g.rollupItems-branches, "the delta room reserved is layout 4's")
}

func countsOf(as []applied6) []table.AppliedCount {
	var out []table.AppliedCount
	for _, a := range as {
		if a.kind != appliedOpen {
			out = append(out, a.count)
		}
	}
	return out
}

// TestPlan6_PlanStringNamesLayout6AndItsLanes: "99/32/6/32" with roll-ups
// on, "99/32/6/0" off.
func TestPlan6_PlanStringNamesLayout6AndItsLanes(t *testing.T) {
	c := plan6Cases()[0]
	on, _ := plan6For(c.recs, 99, 32, aggregates.RollupLanes, plan6Options{})
	off, _ := plan6For(c.recs, 99, 32, 0, plan6Options{})
	assert.Equal(t, "99/32/6/32", on.plan.String())
	assert.Equal(t, "99/32/6/0", off.plan.String())
	assert.Empty(t, off.items)
	for _, g := range off.groups {
		assert.Empty(t, g.staging)
		assert.Empty(t, g.puts)
		assert.Empty(t, g.folds)
	}
}

// TestPlan6_DigestCoversEveryPlannedWrite: each element of a plan changed
// in turn changes the digest.
func TestPlan6_DigestCoversEveryPlannedWrite(t *testing.T) {
	c := plan6Cases()[1]
	fresh := func() *plan6 {
		p, _ := plan6For(c.recs, c.items, c.entries, aggregates.RollupLanes, plan6Options{})
		return p
	}
	base := fresh().digest()
	require.Equal(t, base, fresh().digest(), "pure")
	first := func(p *plan6, pred func(g *group6) bool) *group6 {
		for k := range p.groups {
			if pred(&p.groups[k]) {
				return &p.groups[k]
			}
		}
		t.Fatal("no group to mutate")
		return nil
	}
	mutations := map[string]func(p *plan6){
		"end":         func(p *plan6) { p.batch.to += "0" },
		"plan string": func(p *plan6) { p.plan.items-- },
		"group count": func(p *plan6) { p.groups = append(p.groups, group6{}) },
		"part figure": func(p *plan6) {
			g := first(p, func(g *group6) bool { return len(g.parts) > 0 })
			d := *g.parts[0].delta
			d.Count++
			g.parts[0].delta = &d
		},
		"applied count": func(p *plan6) {
			g := first(p, func(g *group6) bool { return len(g.applied) > 0 })
			g.applied[0].count.Applied++
		},
		"applied kind": func(p *plan6) {
			g := first(p, func(g *group6) bool { return len(g.applied) > 0 })
			g.applied[0].kind = appliedOpen
		},
		"staging put or update": func(p *plan6) {
			g := first(p, func(g *group6) bool { return len(g.staging) > 0 })
			g.staging[0].put = !g.staging[0].put
		},
		"staging periods": func(p *plan6) {
			g := first(p, func(g *group6) bool { return len(g.staging) > 0 })
			g.staging[0].periods = nil
		},
		"delta item figures": func(p *plan6) {
			g := first(p, func(g *group6) bool { return len(g.puts) > 0 })
			for _, d := range p.items[g.puts[0]].periods {
				d.Count += 7
			}
		},
		"delta item placement": func(p *plan6) {
			g := first(p, func(g *group6) bool { return len(g.puts) > 0 })
			g.puts = nil
		},
		"staging delete klast": func(p *plan6) {
			g := first(p, func(g *group6) bool { return len(g.deletes) > 0 })
			p.items[g.deletes[0]].klast++
		},
		"quarantine": func(p *plan6) {
			p.groups[0].quarantine = append(p.groups[0].quarantine, &change{rec: &Record{EventID: "x"}})
		},
		"folds": func(p *plan6) {
			p.groups[0].folds = append(p.groups[0].folds, &change{rec: &Record{EventID: "x"}})
		},
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			p := fresh()
			mutate(p)
			assert.NotEqual(t, base, p.digest())
		})
	}
}

// TestPlan6_RandomizedBatchesKeepEveryRule plans random batches (tenants,
// branches, currencies, backdated and later periods, modifies, deletes,
// repeats, invalid records, other batches' roll-up delta records; random
// m and e) under the design, open question 9 and roll-ups off, and checks
// every rule of checkPlan6. $LEDGER_SEEDS chooses
// the seeds.
func TestPlan6_RandomizedBatchesKeepEveryRule(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	if env := os.Getenv("LEDGER_SEEDS"); env != "" {
		seeds = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			require.NoError(t, err, "LEDGER_SEEDS")
			seeds = append(seeds, n)
		}
	}
	for _, seed := range seeds {
		for _, v := range []struct {
			lanes int
			opts  plan6Options
		}{{aggregates.RollupLanes, plan6Options{}}, {aggregates.RollupLanes, plan6Options{branchesOnly: true}}, {0, plan6Options{}}} {
			opts := v.opts
			t.Run(fmt.Sprintf("seed=%d/lanes=%d/branchesOnly=%t", seed, v.lanes, opts.branchesOnly), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 6))
				for round := range 25 {
					recs := randomBatch6(rng)
					items := 12 + rng.IntN(88)
					entries := 1 + rng.IntN(32)
					p, _ := plan6For(recs, items, entries, v.lanes, opts)
					if !checkPlan6(t, p, recs) {
						t.Fatalf("round %d (m %d, e %d): the plan breaks a rule:\n%s", round, items, entries, p.render())
					}
					q, _ := plan6For(recs, items, entries, v.lanes, opts)
					require.Equal(t, p.digest(), q.digest(), "pure")
				}
			})
		}
	}
}

// randomBatch6 is a random batch of 1–300 records.
func randomBatch6(rng *rand.Rand) plan6Batch {
	var b plan6Batch
	curs := []string{"BRL", "EUR", "JPY", ""}
	dates := []string{"2024-01-02", "2024-01-03", "2024-02-09", "2023-12-31", "2024-06-30"}
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	var alive []txn6
	branches := 1 + rng.IntN(12)
	n := 1 + rng.IntN(300)
	for i := range n {
		r := rng.Float64()
		switch {
		case len(alive) > 0 && r < 0.15:
			j := rng.IntN(len(alive))
			tx := alive[j]
			tx.op, tx.newAmount, tx.newCategory = "MODIFY", fmt.Sprint(1+rng.IntN(50)), names[rng.IntN(len(names))]
			b.add(tx)
			alive[j].amount, alive[j].category = tx.newAmount, tx.newCategory
		case len(alive) > 0 && r < 0.25:
			j := rng.IntN(len(alive))
			tx := alive[j]
			tx.op = "REMOVE"
			b.add(tx)
			alive = slices.Delete(alive, j, j+1)
		case len(b) > 0 && r < 0.28:
			b = append(b, b[rng.IntN(len(b))]) // a repeat: deduplicated
		case r < 0.31:
			b.addLane(rng, curs[rng.IntN(3)], dates[rng.IntN(len(dates))], names[rng.IntN(len(names))])
		default:
			br := rng.IntN(branches)
			tx := txn6{op: "INSERT", br: fmt.Sprintf("b%02d", br), cur: curs[br%len(curs)], date: dates[rng.IntN(len(dates))],
				id: fmt.Sprint(i), typ: []string{"INCOME", "EXPENSE"}[rng.IntN(2)], amount: fmt.Sprint(1 + rng.IntN(50)),
				category: names[rng.IntN(len(names))], invalid: rng.IntN(30) == 0}
			if br%5 == 4 {
				tx.tenantOverride = "u"
			}
			b.add(tx)
			if !tx.invalid {
				alive = append(alive, tx)
			}
		}
	}
	// Sequence numbers in order (a repeat keeps its own).
	return b
}

// checkPlan6 checks the rules a layout-6 plan keeps (docs/exactly-once.md,
// "Why every record is counted once"), reporting each broken one; it
// returns false if any is.
func checkPlan6(t *testing.T, p *plan6, recs []Record) bool {
	t.Helper()
	ok := true
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		ok = false
	}
	m := p.plan.items
	// Groups within m writes (a part alone may pass a small m: then it is
	// its group's only part and its group holds at most 2e + 3), and never
	// over 99 actions.
	for k := range p.groups {
		g := &p.groups[k]
		n := p.actions(k)
		if n > m && !(len(g.parts) == 1 && n <= 2*p.plan.entries+3) {
			fail("group %d: %d actions, more than m = %d", k, n, m)
		}
		if n > 99 {
			fail("group %d: %d actions, more than 99", k, n)
		}
		if g.writes() > m && len(g.parts) != 1 {
			fail("group %d: %d writes planned, more than m = %d", k, g.writes(), m)
		}
		// No two actions on one item.
		seen := map[string]bool{}
		one := func(what string) {
			if seen[what] {
				fail("group %d: two actions on %s", k, what)
			}
			seen[what] = true
		}
		for _, a := range g.applied {
			one("applied " + a.count.Tenant + "/" + a.count.Branch)
		}
		for _, st := range g.staging {
			one(fmt.Sprint("staging ", st.item))
		}
		for _, s := range g.deletes {
			one(fmt.Sprint("staging ", s))
		}
		for _, s := range g.puts {
			one(fmt.Sprint("put ", s))
		}
	}
	if p.plan.lanes > 0 {
		ok = checkPlan6Delta(t, p) && ok
	}
	// Every counted record's branch counted exactly once; open marks.
	changes := make([]change, len(recs))
	for i := range recs {
		changes[i] = classify(&recs[i])
	}
	dedupe(changes)
	want := map[branchID]table.AppliedCount{}
	for _, c := range appliedCounts(changes) {
		want[branchID{c.Tenant, c.Branch}] = c
	}
	got := map[branchID]table.AppliedCount{}
	opened := map[branchID]int{}
	first, last := map[branchID]int{}, map[branchID]int{}
	for i, pt := range p.parts {
		if pt.rollup() {
			b := branchOf(pt)
			if _, seen := first[b]; !seen {
				first[b] = p.partGroup[i]
			}
			first[b], last[b] = min(first[b], p.partGroup[i]), max(last[b], p.partGroup[i])
		}
	}
	for k := range p.groups {
		for _, a := range p.groups[k].applied {
			b := branchID{a.count.Tenant, a.count.Branch}
			switch a.kind {
			case appliedOpen:
				opened[b]++
				if first[b] != k || last[b] <= k {
					fail("branch %v: open in group %d, its parts in %d…%d", b, k, first[b], last[b])
				}
			default:
				if _, twice := got[b]; twice {
					fail("branch %v counted twice", b)
				}
				got[b] = a.count
				if l, has := last[b]; has && l != k {
					fail("branch %v counted in group %d, its last part in %d", b, k, l)
				}
				if (a.kind == appliedCountClose) != (first[b] < last[b]) {
					fail("branch %v: %s with parts in %d…%d", b, a.kind, first[b], last[b])
				}
			}
		}
	}
	if !assert.Equal(t, want, got, "every counted record's branch counted exactly once") {
		ok = false
	}
	for b := range first {
		if want := map[bool]int{true: 1, false: 0}[first[b] < last[b]]; opened[b] != want {
			fail("branch %v: %d open marks, want %d", b, opened[b], want)
		}
	}
	return ok
}

// checkPlan6Delta checks the batch delta: every part's figures in exactly
// one item; each item placed at or after the last group holding a part it
// sums; each contributor's transition in exactly one staging write or in
// its own group's put; staging put first, deleted by the placing group.
func checkPlan6Delta(t *testing.T, p *plan6) bool {
	t.Helper()
	ok := true
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		ok = false
	}
	type at struct {
		rg  aggregates.RollupGroup
		per aggregates.Period
	}
	type nameAt struct {
		at
		dim  aggregates.Dimension
		name string
	}
	// Sum of the parts, by (tenant, currency, period) and name.
	sum := map[at]*aggregates.Report{}
	for _, pt := range p.parts {
		if !pt.rollup() {
			continue
		}
		a := at{aggregates.RollupGroup{Tenant: pt.key.Tenant, Currency: aggregates.RollupCurrency(pt.currency)}, pt.key.Period}
		if sum[a] == nil {
			sum[a] = &aggregates.Report{}
		}
		sum[a].Merge(pt.delta)
	}
	// What the items hold, each figure in exactly one item.
	held := map[at]*aggregates.Report{}
	totalsIn := map[at]int{}
	nameIn := map[nameAt]int{}
	placedOf := map[int]int{}
	for k := range p.groups {
		for _, s := range p.groups[k].puts {
			if _, twice := placedOf[s]; twice {
				fail("item s%d put twice", s)
			}
			placedOf[s] = k
		}
	}
	for s := range p.items {
		it := &p.items[s]
		if k, put := placedOf[s]; !put || k != it.placed {
			fail("item s%d: placed %d, put in %v", s, it.placed, k)
		}
		for per, d := range it.periods {
			a := at{it.rg, per}
			if it.branchesOnly {
				if !d.IsZero() {
					fail("branches-only item s%d holds figures for %s", s, per)
				}
				continue
			}
			if held[a] == nil {
				held[a] = &aggregates.Report{}
				totalsIn[a] = s
			} else if !d.Totals.IsZero() {
				fail("the totals of %v in two items", a)
			}
			held[a].Merge(&d.Report)
			for _, dim := range aggregates.Dimensions {
				for name := range d.Breakdowns[dim] {
					na := nameAt{a, dim, name}
					if _, twice := nameIn[na]; twice {
						fail("%v in two items", na)
					}
					nameIn[na] = s
				}
			}
		}
	}
	for a, want := range sum {
		want.Prune()
		got := held[a]
		if got == nil {
			got = &aggregates.Report{}
		}
		got.Prune()
		if !want.Totals.Equal(got.Totals) || !equalBreakdowns(want, got) {
			fail("%v: the items hold %+v, the parts sum to %+v", a, got, want)
		}
	}
	// Placement after every part an item sums; the transitions.
	for i, pt := range p.parts {
		if !pt.rollup() {
			continue
		}
		a := at{aggregates.RollupGroup{Tenant: pt.key.Tenant, Currency: aggregates.RollupCurrency(pt.currency)}, pt.key.Period}
		kp := p.partGroup[i]
		var sums []int
		if s, has := totalsIn[a]; has && pt.first && !pt.delta.Totals.IsZero() {
			sums = append(sums, s)
		}
		for _, dim := range aggregates.Dimensions {
			for name, tot := range pt.delta.Breakdowns[dim] {
				if s, has := nameIn[nameAt{a, dim, name}]; has && !tot.IsZero() {
					sums = append(sums, s)
				}
			}
		}
		for _, s := range sums {
			if p.items[s].placed < kp {
				fail("item s%d placed in group %d, before group %d holding a part it sums (%s %s)", s, p.items[s].placed, kp, pt.key.Branch, pt.key.Period)
			}
		}
		if !contributes(pt) {
			continue
		}
		// Its transition: the item holding the period (a branches-only
		// item under open question 9), put in its own group or staged once
		// there.
		var targets []int
		for s := range p.items {
			if p.items[s].branchesOnly == p.opts.branchesOnly && p.items[s].rg == a.rg {
				if _, has := p.items[s].periods[a.per]; has && (p.opts.branchesOnly || totalsIn[a] == s) {
					targets = append(targets, s)
				}
			}
		}
		if len(targets) != 1 {
			fail("part %s %s: %d items take its transition", pt.key.Branch, pt.key.Period, len(targets))
			continue
		}
		s := targets[0]
		it := &p.items[s]
		if it.placed < kp {
			fail("item s%d placed in group %d, before its contributor's group %d", s, it.placed, kp)
		}
		writes := 0
		for _, st := range p.groups[kp].staging {
			if st.item == s && slices.Contains(st.periods, a.per) {
				writes++
			}
		}
		switch {
		case it.placed == kp && writes != 0:
			fail("part %s %s: put in its own group %d and staged %d times", pt.key.Branch, pt.key.Period, kp, writes)
		case it.placed > kp && writes != 1:
			fail("part %s %s: staged %d times in its group %d (item s%d placed in %d)", pt.key.Branch, pt.key.Period, writes, kp, s, it.placed)
		}
	}
	// Staging: kfirst puts, the others update, the placing group deletes.
	for s := range p.items {
		it := &p.items[s]
		var ks []int
		for k := range p.groups {
			for _, st := range p.groups[k].staging {
				if st.item == s {
					ks = append(ks, k)
					if st.put != (k == it.kfirst) {
						fail("item s%d: group %d stages with put %t, kfirst %d", s, k, st.put, it.kfirst)
					}
				}
			}
		}
		deleted := slices.Contains(p.groups[it.placed].deletes, s)
		if it.staged != (len(ks) > 0) || deleted != it.staged {
			fail("item s%d: staged %t, %d staging writes, deleted %t", s, it.staged, len(ks), deleted)
		}
		if len(ks) > 0 && (ks[0] != it.kfirst || ks[len(ks)-1] != it.klast || it.klast >= it.placed) {
			fail("item s%d: staged in %v, kfirst %d klast %d placed %d", s, ks, it.kfirst, it.klast, it.placed)
		}
	}
	if len(p.groups) == 1 {
		for _, st := range p.groups[0].staging {
			fail("a one-group batch stages s%d", st.item)
		}
	}
	return ok
}

func equalBreakdowns(a, b *aggregates.Report) bool {
	for _, dim := range aggregates.Dimensions {
		if len(a.Breakdowns[dim]) != len(b.Breakdowns[dim]) {
			return false
		}
		for name, t := range a.Breakdowns[dim] {
			if u, ok := b.Breakdowns[dim][name]; !ok || !t.Equal(u) {
				return false
			}
		}
	}
	return true
}

// TestPlan6_DeltaItemKeysDecode: every delta item the planner names,
// figure items and open question 9's branches-only items, is a key
// table.DecodeRollupDelta reads; the design's first form of the
// branches-only key (…~b#{currency}#t{j}) is not, which is why they take
// a claim of their own.
func TestPlan6_DeltaItemKeysDecode(t *testing.T) {
	c := plan6Cases()[3] // a period summing to zero: figure and branches-only items
	p, _ := plan6For(c.recs, c.items, c.entries, aggregates.RollupLanes, plan6Options{branchesOnly: true})
	var bOnly int
	for s := range p.items {
		it := &p.items[s]
		if it.branchesOnly {
			bOnly++
		}
		item := table.EncodeRollupDelta(it.key(p.batch), it.rg.Currency, it.periods, "2024-01-02T00:00:00Z")
		d, err := table.DecodeRollupDelta(item)
		require.NoError(t, err, "item s%d", s)
		assert.Equal(t, it.rg.Currency, d.Currency)
	}
	require.Positive(t, bOnly)
	claim := p.batch.claim()
	designed := aggregates.Key{PK: aggregates.RollupLanePK("t", 0), SK: claim + "#BRL#t0"}
	_, err := table.DecodeRollupDelta(table.EncodeRollupDelta(designed, "BRL", map[aggregates.Period]*aggregates.RollupDelta{}, "2024-01-02T00:00:00Z"))
	assert.ErrorContains(t, err, "the sort key is not", "the design's …#t{j} key")
}

// TestSplitKeepingTouched_IsSplitRollupDeltaWhenNoPeriodSumsToZero: the
// planner's split is table.SplitRollupDelta's rule (the same items for
// deltas without a zero period), and keeps a touched period whose figures
// sum to zero in its place.
func TestSplitKeepingTouched_IsSplitRollupDeltaWhenNoPeriodSumsToZero(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	for round := range 200 {
		periods := map[aggregates.Period]*aggregates.RollupDelta{}
		touched := map[aggregates.Period]bool{}
		for range 1 + rng.IntN(50) {
			per, err := aggregates.ParsePeriodKey(fmt.Sprintf("DAILY#2024-01-%02d", 1+rng.IntN(28)))
			require.NoError(t, err)
			d := periods[per]
			if d == nil {
				d = &aggregates.RollupDelta{}
				periods[per] = d
			}
			touched[per] = true
			d.Add(aggregates.Totals{Income: decimal.NewFromInt(1), Count: 1}, [3]string{fmt.Sprint("n", rng.IntN(40)), fmt.Sprint("c", rng.IntN(4))})
		}
		clone := func() map[aggregates.Period]*aggregates.RollupDelta {
			out := map[aggregates.Period]*aggregates.RollupDelta{}
			for per, d := range periods {
				dd := *d
				for _, dim := range aggregates.Dimensions {
					dd.Breakdowns[dim] = maps.Clone(d.Breakdowns[dim])
				}
				out[per] = &dd
			}
			return out
		}
		require.Equal(t, table.SplitRollupDelta(clone()), splitKeepingTouched(clone(), touched), "round %d", round)
	}
	zero, err := aggregates.ParsePeriodKey("DAILY#2024-01-01")
	require.NoError(t, err)
	kept := splitKeepingTouched(map[aggregates.Period]*aggregates.RollupDelta{zero: {}}, map[aggregates.Period]bool{zero: true})
	require.Len(t, kept, 1)
	assert.Contains(t, kept[0], zero)
	assert.Empty(t, table.SplitRollupDelta(map[aggregates.Period]*aggregates.RollupDelta{zero: {}}))
}

// TestParseBatchPlan_Layout6AndTheOldRefuseEachOtherByName: this
// version's parser accepts layout 6 with K = 32 (roll-ups on) or 0 (off)
// and layout 4 with its K, and refuses another K and layout 5 (a
// s17-plan5c build's) by name; new batches are planned under layout 6.
func TestParseBatchPlan_Layout6AndTheOldRefuseEachOtherByName(t *testing.T) {
	on, err := parseBatchPlan("99/32/6/32")
	require.NoError(t, err)
	assert.Equal(t, batchPlan{items: 99, entries: 32, layout: 6, lanes: aggregates.RollupLanes}, on)
	assert.Equal(t, "99/32/6/32", on.String())
	off, err := parseBatchPlan("12/2/6/0")
	require.NoError(t, err)
	assert.Equal(t, batchPlan{items: 12, entries: 2, layout: 6}, off)
	assert.Equal(t, "12/2/6/0", off.String())
	for _, s := range []string{"99/32/6/16", "99/32/5/32", "99/32/7/32", "99/32/6"} {
		_, err := parseBatchPlan(s)
		assert.ErrorIs(t, err, errOldPlan, s)
	}
	v4, err := parseBatchPlan("99/32/4/32")
	require.NoError(t, err, "a layout-4 batch is finished as planned")
	assert.Equal(t, batchPlan{items: 99, entries: 32, layout: 4, lanes: aggregates.RollupLanes}, v4)

	for _, noRollups := range []bool{false, true} {
		p, err := New(nil, Config{Table: "t", NoRollups: noRollups}, nil)
		require.NoError(t, err)
		want := "99/32/6/32"
		if noRollups {
			want = "99/32/6/0"
		}
		assert.Equal(t, want, p.batchPlan().String())
	}
}
