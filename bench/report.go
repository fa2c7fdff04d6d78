package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Markdown writes the result as the tables BENCHMARKS.md shows.
func (res *Result) Markdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	mode := "full"
	if res.Config.Quick {
		mode = "quick"
	}
	m := res.Machine
	p("## ledger bench (%s run)\n\n", mode)
	if res.Err != "" {
		p("**Incomplete run**: %s\n\n", res.Err)
	}
	if res.Config.Command != "" {
		p("Command: `%s`.  \n", res.Config.Command)
	}
	p("Machine: %d CPUs, %.1f GiB memory, %s, %s, %s. Load average %s at the start, %s at the end. Run took %s.\n\n",
		m.CPUs, m.MemoryGiB, m.GoVersion, m.Java, m.DynamoDBLocal, m.LoadBefore, m.LoadAfter, res.Duration.Round(time.Second))

	if len(res.Rows) > 0 { // none with -skip backlogs
		p("### Backlog: write cost, throughput and exactness, with 1%% of the records delivered twice\n\n")
		p("| workload | approach | batch | changes | write requests / 1k changes | item writes / 1k changes | WCU / 1k changes (AWS billing) | DynamoDB Local reported / 1k | computed ÷ reported³ | changes/s end to end | raw drain records/s | end to end ÷ raw | item writes/s end to end | ÷ DynamoDB Local's item-write ceiling⁴ | reports exact afterwards |\n")
		p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, r := range res.Rows {
			batch := "—"
			if r.Batch > 0 {
				batch = fmt.Sprintf("%d", r.Batch)
			}
			raw, ratio := "—", "—"
			if r.RawRate() > 0 {
				raw = fmt.Sprintf("%.0f", r.RawRate())
				ratio = fmt.Sprintf("%.1f%%", 100*r.Throughput()/r.RawRate())
			}
			cross := "—"
			if r.Cost.Reported > 0 {
				cross = fmt.Sprintf("%.2f", float64(r.Cost.LocalUnits)/r.Cost.Reported)
			}
			wcu := fmt.Sprintf("%.0f", r.AggregationUnits())
			if r.Baseline > 0 {
				wcu += "²"
			}
			req := fmt.Sprintf("%.0f", per1000(float64(r.Cost.Writes()), r.Changes))
			if r.Approach == SyncTransaction {
				req += "¹"
			}
			ceiling := "—"
			if c := res.itemWriteCeiling(r); c > 0 {
				ceiling = fmt.Sprintf("%.1f%%", 100*r.ItemWriteRate()/c)
			}
			p("| %s | %s | %s | %d | %s | %.0f | %s | %.0f | %s | %.0f | %s | %s | %.0f | %s | %s |\n",
				r.Workload, r.Approach, batch, r.Changes, req, per1000(float64(r.Cost.ItemWrites), r.Changes), wcu, per1000(r.Cost.Reported, r.Changes), cross,
				r.Throughput(), raw, ratio, r.ItemWriteRate(), ceiling, exactness(r))
		}
		p("\nPer-record approaches run with the event source mapping's default batch size (100); their writes do not depend on it.  \n")
		for _, r := range res.Rows {
			if r.Approach == LedgerTumbling {
				p("%s: the mapping's TumblingWindowInSeconds is %d; records fall into windows by their ApproximateCreationDateTime (which DynamoDB Local rounds down to the minute), and a backlog's windows are taken as closed (the invocation holding its last record is its window's final one).  \n",
					LedgerTumbling, int(res.Config.TumblingWindow/time.Second))
				break
			}
		}
		if len(res.Config.PollerBatches) > 0 {
			p("Poller batches above 1,000 are pages of 1,000 folded into one batch while the shard is behind (`poller --batch-records`); the Lambda handler's counterpart would be the mapping's BatchSize (up to 10,000), which the bench's mapping, reading one page per batch, does not play.  \n")
		}
		p("¹ transactions that carry the change itself: they replace the writer's own write.  \n")
		p("² the transactions' units minus what the writer's plain write of each change would cost.  \n")
		p("³ the units computed for the successful writes the way DynamoDB Local reports them (for a transaction: twice the sum of the distinct per-item units), divided by what it reported.  \n")
		p("⁴ the approach's item writes per second end to end, against the highest rate measured below for its kind of write (TransactWriteItems when it wrote transactions, else UpdateItem); above 100%% when the machine was less loaded during the approach than during both measurements.\n\n")
		if len(res.WriteRates) > 0 {
			w := res.WriteRates[0]
			p("DynamoDB Local's own item-write rate in this run (additive updates of report-shaped items of %d bytes, each writer to its own %d items, %s per measurement)", w.ItemBytes, writeRateBatch, res.Config.WriteRateTime)
			when := ""
			for _, w := range res.WriteRates {
				what := "UpdateItem"
				if w.Op != "UpdateItem" {
					what = fmt.Sprintf("TransactWriteItems of %d updates", writeRateBatch)
				}
				sep := ","
				if w.When != when {
					when, sep = w.When, fmt.Sprintf("; %s the backlogs:", w.When)
				}
				p("%s %s, %s: %.0f item writes/s", sep, what, writers(w.Workers), w.PerSecond())
			}
			p(".\n\n")
		}

		p("### Where the time went: each approach's table calls on workload b (count × total time; stream reads not included)\n\n")
		p("| approach | batch | calls |\n|---|---:|---|\n")
		for _, r := range res.Rows {
			if r.Workload != "b" {
				continue
			}
			batch := "—"
			if r.Batch > 0 {
				batch = fmt.Sprintf("%d", r.Batch)
			}
			p("| %s | %s | %s |\n", r.Approach, batch, r.Cost.TimeSummary())
		}
		p("\n")
	}

	if len(res.Lag) > 0 {
		p("### Lag from write to report commit at %d changes/s (workload b, %d s per approach)\n\n", res.LagRate, res.Config.LagSeconds)
		for _, l := range res.Lag {
			if l.Window > 0 {
				p("%s commits a window when it closes: its lag is up to the window (%s) by design.\n\n", l.Approach, l.Window)
			}
		}
		p("| approach | changes written | measured | p50 | p99 | kept up |\n|---|---:|---:|---:|---:|---|\n")
		for _, l := range res.Lag {
			kept := "yes"
			if !l.Sustained {
				kept = fmt.Sprintf("**no** (%d of %d committed %s after the last write)", l.Samples, l.Expected, 30*time.Second+l.Window)
			}
			p("| %s | %d | %d | %s | %s | %s |\n", l.Approach, l.Written, l.Samples, seconds(l.P50), seconds(l.P99), kept)
		}
		p("\n")
	}

	if len(res.CPU) > 0 {
		p("### CPU only, one core (GOMAXPROCS=1): %d recorded records per round, as Lambda events of 1,000, the two paths in alternating rounds\n\n", res.CPU[0].Records)
		p("| path | records/s (median round) | ns/record | records/s (fastest round) | bytes/record | rounds |\n|---|---:|---:|---:|---:|---:|\n")
		for _, c := range res.CPU {
			p("| %s | %.0f | %.0f | %.0f | %.0f | %d |\n", c.Name, c.PerSecond, c.NsPerRecord, c.Fastest, c.BytesPerRec, c.Rounds)
		}
		if len(res.CPU) == 2 && res.CPU[1].PerSecond > 0 {
			p("\nThe ledger path runs at %.0f%% of the floor's rate (median rounds).\n", 100*res.CPU[0].PerSecond/res.CPU[1].PerSecond)
		}
		p("\n")
	}

	if len(res.Rows) > 0 {
		p("### Report item sizes after the run (ledger's approaches; bytes by DynamoDB's rules)\n\n")
		p("| workload | approach | batch | report items | entry items | p50 | p99 | max |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range res.Rows {
			if r.Sizes == nil {
				continue
			}
			z := r.Sizes
			p("| %s | %s | %d | %d | %d | %d | %d | %d |\n", r.Workload, r.Approach, r.Batch, z.ReportItems, z.EntryItems, z.P50, z.P99, z.Max)
		}
		p("\n")
	}

	res.calendarMarkdown(p)

	if mr := res.Memory; mr != nil {
		p("### Poller binary (`poller --drain`) draining a backlog of inserts shaped like workload a\n\n")
		p("| backlog records | written in | drained in | backlog records/s | records read (backlog + its own report writes; last sample, every 250 ms) | peak RSS while applying the backlog | peak RSS, whole drain | reports exact afterwards |\n")
		p("|---:|---:|---:|---:|---:|---:|---:|---|\n")
		mib := func(b int64) string {
			if b <= 0 {
				return "unknown"
			}
			return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
		}
		exact := fmt.Sprintf("yes (%d reports)", mr.Reports)
		if mr.Diffs > 0 {
			exact = fmt.Sprintf("**no**: %d of %d reports differ", mr.Diffs, mr.Reports)
		}
		p("| %d | %s | %s | %.0f | %d | %s | %s | %s |\n\n", mr.Records, mr.WriteTook.Round(time.Second), mr.DrainTook.Round(time.Second),
			float64(mr.Records)/mr.DrainTook.Seconds(), mr.RecordsRead, mib(mr.BacklogRSS), mib(mr.PeakRSS), exact)
		command := mr.ReconcileCommand
		if command == "" {
			command = "ledgerctl reconcile" // results written before the field
		}
		p("### `%s` over the drained table\n\n", command)
		p("| transactions | took | transactions/s | peak RSS | exit |\n|---:|---:|---:|---:|---:|\n")
		p("| %d | %s | %.0f | %s | %d |\n\n", mr.Records, mr.ReconcileTook.Round(time.Millisecond),
			float64(mr.Records)/mr.ReconcileTook.Seconds(), mib(mr.ReconcileRSS), mr.ReconcileExit)
	}

	res.targets(w)
}

func writers(n int) string {
	if n == 1 {
		return "1 writer"
	}
	return fmt.Sprintf("%d writers", n)
}

func seconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}

func exactness(r Row) string {
	what := "reports"
	if r.TotalsOnly {
		what = "reports' totals"
	}
	if r.Diffs == 0 {
		return fmt.Sprintf("yes (%d %s)", r.Reports, what)
	}
	return fmt.Sprintf("**no**: %d of %d %s wrong", r.Diffs, r.Reports, what)
}

// row finds a row.
func (res *Result) row(workload string, a Approach, batch int) (Row, bool) {
	for _, r := range res.Rows {
		if r.Workload == workload && r.Approach == a && (r.Batch == batch || a.batchless()) {
			return r, true
		}
	}
	return Row{}, false
}

// targets checks issue 6's targets on workload b at batch size 1,000.
func (res *Result) targets(w io.Writer) {
	base, ok := res.row("b", PerRecordSeed, 0)
	if !ok {
		return
	}
	fmt.Fprintf(w, "### Targets (workload b, batch size 1,000)\n\n")
	for _, a := range []Approach{LedgerPoller, LedgerLambda, LedgerTumbling} {
		r, ok := res.row("b", a, 1000)
		if !ok {
			continue
		}
		ratio := base.AggregationUnits() / r.AggregationUnits()
		verdict := "met"
		if ratio < 20 {
			verdict = fmt.Sprintf("**missed**: %.1f× short of 20×", 20/ratio)
		}
		fmt.Fprintf(w, "- %s: %.0f WCU per 1,000 changes against approach 1's %.0f: 1/%.1f (target at most 1/20): %s.\n",
			a, r.AggregationUnits(), base.AggregationUnits(), ratio, verdict)
		share := r.Throughput() / r.RawRate()
		verdict = "met"
		if share < 0.8 {
			verdict = fmt.Sprintf("**missed** by %.0f points", 100*(0.8-share))
		}
		fmt.Fprintf(w, "- %s: %.0f changes/s end to end, %.1f%% of the raw drain rate (%.0f records/s) (target at least 80%%): %s.\n",
			a, r.Throughput(), 100*share, r.RawRate(), verdict)
	}
	for _, batch := range res.Config.PollerBatches {
		if r, ok := res.row("b", LedgerPoller, batch); ok {
			fmt.Fprintf(w, "- Beyond the targets' batch size: %s at batch %d: %.0f WCU per 1,000 changes, 1/%.1f of approach 1; %.0f changes/s.\n",
				LedgerPoller, batch, r.AggregationUnits(), base.AggregationUnits()/r.AggregationUnits(), r.Throughput())
		}
	}
	// Issue 11: high cardinality costs at most twice workload b's write
	// units per change.
	for _, a := range []Approach{LedgerPoller, LedgerLambda, LedgerTumbling} {
		b, okB := res.row("b", a, 1000)
		e, okE := res.row("e", a, 1000)
		if !okB || !okE {
			continue
		}
		ratio := e.AggregationUnits() / b.AggregationUnits()
		verdict := "met"
		if ratio > 2 {
			verdict = fmt.Sprintf("**missed**: %.1f× of b", ratio)
		}
		fmt.Fprintf(w, "- %s, high cardinality (workload e): %.0f WCU per 1,000 changes against b's %.0f: %.2f× (target at most 2×): %s.\n",
			a, e.AggregationUnits(), b.AggregationUnits(), ratio, verdict)
	}
	fmt.Fprintln(w)
}

// String is the markdown.
func (res *Result) String() string {
	var b strings.Builder
	res.Markdown(&b)
	return b.String()
}
