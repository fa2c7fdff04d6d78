package aggregates_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ledger-dev/ledger/aggregates"
)

// BenchmarkRollupNameLanes is the model behind issue 24's hole 9 decision
// (docs/exactly-once.md, "Tenant roll-ups", "Hole 9: overflow names by
// lane"): what a tenant's breakdown names cost the roll-ups under the
// built layout (every entry of a commit's delta in the lane of its claim,
// so a name seen by many commits lands in up to K partials) and under the
// proposed one (the entries in the lane of FNV(name) mod K, one delta per
// lane a commit's names hash to: a name lives in one partial). One period,
// one dimension of names per transaction as the workloads say; the figures
// are per 1,000 commits:
//
//   - delta_puts: the stage-1 roll-up delta puts (each also a delete at its
//     fold, a stream INSERT and REMOVE, and room in a commit's group);
//   - partial_updates: the stage-2 partial report-item updates (one per
//     delta item folded, per period);
//   - entry_writes: the stage-2 entry-item writes (a name past its
//     partial's 32 inline ones);
//   - entry_items: the entry items stored at the end (what a breakdown
//     read merges and storage holds);
//   - inline_names: the names held inline over all partials at the end
//     (what makes a partial's item, and so every update of it, larger).
//
// go test ./aggregates -run '^$' -bench RollupNameLanes -benchtime 1x
func BenchmarkRollupNameLanes(b *testing.B) {
	const commits, perCommit = 2000, 5 // a batch group holds a few of the tenant's transactions
	workloads := []struct {
		name  string
		names func(r *rand.Rand, i int) string // the name of the i-th transaction
	}{
		{"honest_20_names", func(r *rand.Rand, _ int) string { return fmt.Sprintf("category-%d", r.IntN(20)) }},
		{"honest_200_names", func(r *rand.Rand, _ int) string { return fmt.Sprintf("category-%d", r.IntN(200)) }},
		{"hostile_distinct", func(_ *rand.Rand, i int) string { return fmt.Sprintf("hostile-%d", i) }},
		{"hostile_3000_repeated", func(r *rand.Rand, _ int) string { return fmt.Sprintf("hostile-%d", r.IntN(3000)) }},
	}
	for _, w := range workloads {
		for _, byName := range []bool{false, true} {
			layout := "claim_lane"
			if byName {
				layout = "name_lane"
			}
			b.Run(w.name+"/"+layout, func(b *testing.B) {
				var m nameLaneModel
				for range b.N {
					m = runNameLaneModel(commits, perCommit, byName, w.names)
				}
				per := 1000.0 / commits
				b.ReportMetric(float64(m.deltaPuts)*per, "delta_puts/1k_commits")
				b.ReportMetric(float64(m.partialUpdates)*per, "partial_updates/1k_commits")
				b.ReportMetric(float64(m.entryWrites)*per, "entry_writes/1k_commits")
				b.ReportMetric(float64(m.entryItems), "entry_items")
				b.ReportMetric(float64(m.inline), "inline_names")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

type nameLaneModel struct{ deltaPuts, partialUpdates, entryWrites, entryItems, inline int }

func runNameLaneModel(commits, perCommit int, byName bool, name func(*rand.Rand, int) string) nameLaneModel {
	r := rand.New(rand.NewPCG(24, 9))
	type partial struct{ inline, entries map[string]bool }
	partials := make([]partial, aggregates.RollupLanes)
	for k := range partials {
		partials[k] = partial{map[string]bool{}, map[string]bool{}}
	}
	var m nameLaneModel
	tx := 0
	for c := range commits {
		claim := fmt.Sprintf("shard-%d~%020d~g0", c%4, c)
		lanes := map[int][]string{aggregates.RollupLane(claim): nil} // the totals' delta
		for range perCommit {
			n := name(r, tx)
			tx++
			k := aggregates.RollupLane(claim)
			if byName {
				k = aggregates.RollupLane(n)
			}
			lanes[k] = append(lanes[k], n)
		}
		m.deltaPuts += len(lanes)
		m.partialUpdates += len(lanes)
		for k, names := range lanes {
			p := partials[k]
			for _, n := range names {
				switch {
				case p.inline[n]:
				case len(p.inline) < 32 && !p.entries[n]:
					p.inline[n] = true
				default:
					p.entries[n] = true
					m.entryWrites++
				}
			}
		}
	}
	for _, p := range partials {
		m.entryItems += len(p.entries)
		m.inline += len(p.inline)
	}
	return m
}
