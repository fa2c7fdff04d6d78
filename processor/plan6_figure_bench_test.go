package processor_test

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/ledger-dev/ledger/bench"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// printedFigures keeps each figure printed once however often the
// benchmark runs.
var printedFigures sync.Map

// BenchmarkPlanLayouts_CatchUp plans the catch-up cell's batches of
// `ledgerbench rollups` (workload c, 1,000 branches in BRL, EUR and JPY,
// one live day with 5% backdated up to 60 days, seed 24;
// bench.RollupOps), cut into batches of at most 10,000 records (the
// poller's --batch-records) as one shard's backlog is, under layout 3
// (roll-ups off), layout 4 (today's planner), and plan layout 6 with
// roll-ups off, as designed and with open question 9 (BENCHMARKS.md,
// "Plan layout 6 planned: what its staging costs"). It prints, per batch
// and per 1,000 changes, what each plan writes, billed from the sizes of
// the items the plan determines; b.N plans the whole set again. A last
// figure cuts the cell's changes into batches of 100 records, about what a
// live poller's 1 s window holds at the live cell's 100 changes a second.
//
//	go test -run '^$' -bench BenchmarkPlanLayouts_CatchUp -benchtime 1x ./processor/
func BenchmarkPlanLayouts_CatchUp(b *testing.B) {
	for _, fig := range []struct{ changes, batch int }{{2000, 10000}, {10000, 10000}, {30000, 10000}, {2000, 100}} {
		n := fig.changes
		b.Run(fmt.Sprintf("changes=%d/batch=%d", n, fig.batch), func(b *testing.B) {
			recs := catchUpRecords(n)
			var batches [][]processor.Record
			for i := 0; i < len(recs); i += fig.batch {
				batches = append(batches, recs[i:min(i+fig.batch, len(recs))])
			}
			var costs [][]processor.PlanCost
			b.ResetTimer()
			for range b.N {
				costs = costs[:0]
				for _, batch := range batches {
					costs = append(costs, processor.PlanLayoutsForFigure(batch))
				}
			}
			b.StopTimer()
			per := perThousand(costs, n)
			for i, c := range per {
				switch i {
				case 1:
					b.ReportMetric(c.lanes+c.staging+c.extraClaims, "l4-rollup-WCU/1k")
				case 3:
					b.ReportMetric(c.lanes+c.staging+c.extraClaims, "l6-rollup-WCU/1k")
				case 4:
					b.ReportMetric(c.lanes+c.staging+c.extraClaims, "l6q9-rollup-WCU/1k")
				}
			}
			if _, done := printedFigures.LoadOrStore(fig, true); !done {
				printFigure(os.Stdout, n, fig.batch, costs, per)
			}
		})
	}
}

// catchUpRecords are the stream records of the cell's n changes, one per
// change, in order.
func catchUpRecords(n int) []processor.Record {
	ops := bench.RollupOps(n, 1, 24)
	recs := make([]processor.Record, len(ops))
	for i, op := range ops {
		seq := fmt.Sprintf("%021d", i+1)
		r := processor.Record{EventID: "ev" + seq, SequenceNumber: seq, Keys: table.Key(op.Key), OldImage: op.Old, NewImage: op.New}
		switch op.Kind {
		case bench.OpInsert:
			r.EventName = "INSERT"
		case bench.OpModify:
			r.EventName = "MODIFY"
		default:
			r.EventName = "REMOVE"
		}
		recs[i] = r
	}
	return recs
}

// perK is one layout's figures per 1,000 changes over every batch.
type perK struct {
	layout                                     string
	groups, lanes, staging, extraClaims, stepA float64
	stagingWrites, deltaItems                  float64
}

// perThousand sums each layout over the batches, per 1,000 changes; extra
// claims are the claims a layout with roll-ups makes beyond the same rule
// without (layout 4 against 3, 6 against 6/0).
func perThousand(costs [][]processor.PlanCost, changes int) []perK {
	f := 1000 / float64(changes)
	out := make([]perK, len(costs[0]))
	for _, batch := range costs {
		for i, c := range batch {
			out[i].layout = c.Layout
			out[i].groups += float64(c.Groups) * f
			out[i].lanes += float64(c.DeltaUnits) * f
			out[i].staging += float64(c.StagingUnits+c.StagingDeleteUnits) * f
			out[i].stepA += float64(c.StepAUnit) * f
			out[i].stagingWrites += float64(c.StagingWrites) * f
			out[i].deltaItems += float64(c.DeltaItems) * f
		}
	}
	base := map[int]int{1: 0, 3: 2, 4: 2}
	for i, j := range base {
		out[i].extraClaims = 2 * (out[i].groups - out[j].groups)
	}
	return out
}

func printFigure(w io.Writer, changes, batch int, costs [][]processor.PlanCost, per []perK) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n#### %d changes, %d batch(es) of at most %d records\n\n", changes, len(costs), batch)
	sb.WriteString("| batch | layout | records | groups (delta groups) | largest group | delta items | lane WCU (put + fold delete) | staging writes | staging WCU | staging deletes (WCU) | staging reads | applied counts | open marks | step A WCU | claim WCU |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for bi, batch := range costs {
		for _, c := range batch {
			items := fmt.Sprint(c.DeltaItems)
			if c.BranchesOnlyItems > 0 {
				items += fmt.Sprintf(" (%d branches-only)", c.BranchesOnlyItems)
			}
			fmt.Fprintf(&sb, "| %d | %s | %d | %d (%d) | %d | %s | %d | %d | %d | %d (%d) | %d | %d | %d | %d | %d |\n",
				bi+1, c.Layout, c.Records, c.Groups, c.DeltaGroups, c.MaxActions, items, c.DeltaUnits,
				c.StagingWrites, c.StagingUnits, c.StagingDeletes, c.StagingDeleteUnits, c.StagingReads,
				c.AppliedCounts, c.OpenMarks, c.StepAUnit, c.ClaimUnits)
		}
	}
	sb.WriteString("\nPer 1,000 changes:\n\n")
	sb.WriteString("| layout | groups | delta items | lane WCU | staging writes | staging WCU (writes + deletes) | extra claims WCU (over roll-ups off) | roll-up path WCU | step A WCU |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range per {
		fmt.Fprintf(&sb, "| %s | %.1f | %.1f | %.0f | %.1f | %.0f | %.0f | %.0f | %.0f |\n",
			c.layout, c.groups, c.deltaItems, c.lanes, c.stagingWrites, c.staging, c.extraClaims, c.lanes+c.staging+c.extraClaims, c.stepA)
	}
	_, _ = io.WriteString(w, sb.String())
}
