package bench

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/ledger-dev/ledger/processor/poller"
)

// getRecordsPrice is AWS's DynamoDB Streams read request price (us-east-1:
// $0.02 per 100,000 read request units, a GetRecords call being one unit;
// the first 2.5 million a month are free; reads by a Lambda trigger are
// not billed), aws.amazon.com/dynamodb/pricing/on-demand/.
const getRecordsPrice = 0.02 / 100_000

// idleBackoffOf is the pollers' --max-idle-backoff of r, as its flag says it.
func idleBackoffOf(r *FleetResult) time.Duration {
	if r.MaxIdleBackoff == 0 {
		return poller.MaxIdleBackoffSetting.Default
	}
	return r.MaxIdleBackoff
}

// Markdown writes the fleet run's figures as BENCHMARKS.md shows them.
func (r *FleetResult) Markdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("Fleet run: %d open shards (%d in the stream with the closed ones after %s of stream time), %d pollers, %d transactions a second for %s, then %s idle; stream time ×%g; the pollers' --max-idle-backoff %s.\n\n",
		r.Shards, r.ShardsAtStart, max(r.History, 0), r.Pollers, r.Rate, r.Duration, r.IdleFor, r.Compression, idleBackoffOf(r))
	p("| target | figure |\n|---|---|\n")
	p("| exact: report differences (reconcile after a drain) | %d%s |\n", r.Differences, drained(r))
	p("| exact: child checkpoints moved before the parent was finished (of %d checkpoint writes) / children read before their parent's end | %d / %d |\n", r.CheckpointRecords, r.OrderViolations, r.EarlyReads)
	p("| stream: shards closed during the run (rolls and splits) / in the stream at the end | %d / %d |\n", r.ClosedDuringRun, r.ShardsAtEnd)
	p("| writes: transactions written (rate achieved) | %d (%.0f/s) |\n", r.Written, r.WriteRate)
	p("| balance: leases held (open and closed unfinished shards) first as many as 90%% of the open shards after | %s |\n", secondsOrNever(r.FirstAllLeased))
	p("| balance: the joiner's first listing of the stream complete after it joined | %s |\n", secondsOrNever(r.JoinListed))
	for _, b := range r.Balance {
		p("| balance: %s (at %.0f s): every poller within fair share ±10%% after | %s (deviation at the span's end %.0f%%) |\n", b.Event, b.At, secondsOrNever(b.Within), 100*b.Worst)
	}
	for i, k := range r.HotKeys {
		if i >= 3 {
			break
		}
		p("| hot key %d: `%s` peak write units in one second / in all | %d / %d |\n", i+1, shortKey(k.PK), k.Peak, k.Units)
	}
	p("| commits (TransactWriteItems) / their write units / per commit | %d / %d / %.1f |\n", r.Commits, r.CommitUnits, ratio(r.CommitUnits, r.Commits))
	p("| coordination UpdateItems (leases, checkpoint moves outside commits) / their write units | %d / %d |\n", r.Coordination, r.CoordinationUnits)
	p("| discovery: DescribeStream calls / refused (10 a second) / shards returned | %d / %d / %d |\n", r.DescribeStream, r.DescribeThrottled, r.ShardsListed)
	d := r.Describes
	p("| discovery by kind (live pollers): listing pages ok / refused; children lookups ok / refused; errors | %d / %d; %d / %d; %d |\n",
		d["list/ok"], d["list/throttled"], d["children/ok"], d["children/throttled"], d["list/error"]+d["children/error"])
	p("| GetRecords calls / refused | %d / %d |\n", r.GetRecords, r.GetRecordsThrottled)
	p("| idle: GetRecords per idle shard per hour (%d open shards, %s) | %.0f (%s a month at 1,000 shards) |\n", r.IdleOpenShards, r.IdleFor,
		r.IdleGetRecordsPerShardHour, dollars(r.IdleGetRecordsPerShardHour*1000*730*getRecordsPrice))
	p("| idle: coordination records that reached the stream in %s | %d |\n", r.IdleFor, r.IdleCoordinationRecords)
	p("| memory: process peak RSS (all pollers + the emulation + the meter) / most records one poller held | %d MB / %d |\n", r.PeakRSS>>20, r.MaxHeldRecords)
	p("| lag write → commit p50 / p99 (%d records) | %.2f s / %.2f s |\n", r.LagN, r.LagP50, r.LagP99)
	st := r.Stages
	p("| lag by stage (all records): write → first read p50 / p99; first read → commit p50 / p99 | %.2f s / %.2f s; %.2f s / %.2f s |\n", st.ReadP50, st.ReadP99, st.CommitP50, st.CommitP99)
	p("| lag: start-up (written before %s) records / p99 | %d / %.2f s |\n", steadyFrom(st.SteadyFrom), st.StartN, st.StartP99)
	p("| lag: steady state (written from %s) records / p50 / p99 (of which write → first read p99; first read → commit p99) | %d / %.2f s / %.2f s (%.2f s; %.2f s) |\n",
		steadyFrom(st.SteadyFrom), st.SteadyN, st.SteadyP50, st.SteadyP99, st.SteadyReadP99, st.SteadyCommitP99)
	p("| lag: caught up (written from %s, the start's walk of the shards closed when the writes began over at %s) records / p50 / p99 (of which write → first read p99; first read → commit p99) | %d / %.2f s / %.2f s (%.2f s; %.2f s) |\n",
		caughtUpFrom(st), secondsOrNever(st.WalkedAt), st.CaughtUpN, st.CaughtUpP50, st.CaughtUpP99, st.CaughtUpReadP99, st.CaughtUpCommitP99)
	p("| lag: records written before their shard's first read (waiting for a lease or a parent's end) / their p99 / in the steady state / their wait for a reader p99 / the last such write at | %d / %.2f s / %d / %.2f s / %s |\n",
		st.UnreadN, st.UnreadP99, st.UnreadSteadyN, st.UnreadSteadyWaitP99, secondsOrNever(st.UnreadMaxAt))
	p("| lag: of those, behind their parent when written: records / wait for the parent's end p50 / p99 / then to the child's first read p50 / p99 | %d / %.2f s / %.2f s / %.2f s / %.2f s |\n",
		st.UnreadBehindParent, st.ParentWaitP50, st.ParentWaitP99, st.AfterParentP50, st.AfterParentP99)
	p("| lag: of those, not behind a parent (the shard waiting for a lease) / their wait for a reader p50 / p99 | %d / %.2f s / %.2f s |\n",
		st.UnreadNoParent, st.NoParentWaitP50, st.NoParentWaitP99)
	p("| lag: steady-state records over %.0f s / of them: first read → commit the larger part; read past (a GetRecords a second or more after the write answered without it); an iterator opened on the shard between write and read (a lease changing hands, a reopening); a pause in the shard's reads / that pause p50 / p99 | %d / %d; %d; %d; %d / %.2f s / %.2f s |\n",
		st.TailOver, st.TailN, st.TailCommit, st.TailUnseen, st.TailReopened, st.TailGap, st.TailGapP50, st.TailGapP99)
	p("| lag: changes not committed by the live fleet %s after the writes ended (left to the drain) | %d |\n", r.SettleTook.Round(time.Second), r.Uncommitted)
	if r.Uncommitted > 0 {
		p("\nUncommitted changes the live fleet had read (none listed: never read with an effect): %s\n", strings.Join(r.UncommittedRead, "; "))
		p("\nShards with records the live fleet never got (none listed: every record was read): %s\n", strings.Join(r.UnreadShards, "; "))
	}
	p("\nPer poller (coordinator calls through its own client: Query for the stream's leases and checkpoints, UpdateItem for leases and checkpoint moves):\n\n")
	p("| poller | minutes | mean leases | Query / min | items read / min | UpdateItem / min | leases acquired / handed off / taken over / expired | offers taken / later / not its / left to the listing / refused |\n|---|---:|---:|---:|---:|---:|---|---|\n")
	for _, fp := range r.PerPoller {
		m := max(fp.Minutes, 1e-9)
		e, o := fp.LeaseEvents, fp.Offers
		p("| %s | %.1f | %.0f | %.0f | %.0f | %.0f | %d / %d / %d / %d | %s |\n", fp.Owner, fp.Minutes, fp.MeanLeases, float64(fp.Queries)/m, float64(fp.ItemsRead)/m, float64(fp.Writes)/m,
			e["acquired"], e["handed_off"], e["taken_over"], e["expired"], offerCells(o))
	}
	if len(r.Errors) > 0 {
		p("\nErrors: %s\n", strings.Join(r.Errors, "; "))
	}
	p("\nRun took %s on %d CPUs (load before %s), DynamoDB Local %s.\n", r.Took.Round(time.Second), r.Machine.CPUs, r.Machine.LoadBefore, r.Machine.DynamoDBLocal)
}

// LeaseTimeline writes the leases each poller held, every step seconds.
func (r *FleetResult) LeaseTimeline(w io.Writer, step int) {
	owners := map[string]bool{}
	for _, s := range r.Leases {
		for o := range s.Held {
			owners[o] = true
		}
	}
	names := make([]string, 0, len(owners))
	for o := range owners {
		names = append(names, o)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "| s | %s |\n|---|%s\n", strings.Join(names, " | "), strings.Repeat("---:|", len(names)))
	for i, s := range r.Leases {
		if i%max(step, 1) != 0 {
			continue
		}
		cells := make([]string, len(names))
		for j, o := range names {
			if n, ok := s.Held[o]; ok {
				cells[j] = fmt.Sprint(n)
			}
		}
		fmt.Fprintf(w, "| %.0f | %s |\n", s.At, strings.Join(cells, " | "))
	}
}

// offerCells is a poller's offers by outcome: taken / later / not its /
// left to its listing (unknown shard, parent unfinished, checkpoint
// unread) / refused.
func offerCells(o map[string]int) string {
	return fmt.Sprintf("%d / %d / %d / %d / %d", o["taken"], o["later"], o["not_its"],
		o["unknown_shard"]+o["parent_unfinished"]+o["checkpoint_unread"], o["refused"])
}

// OfferTimeline writes what became of the leases offered to owner (a
// joiner), cumulative, every step seconds while it ran: taken / later /
// not its / left to its listing / refused, beside the leases it held.
func (r *FleetResult) OfferTimeline(w io.Writer, owner string, step int) {
	fmt.Fprintf(w, "| s | leases held | offers taken / later / not its / left to the listing / refused |\n|---|---:|---|\n")
	for i, s := range r.Leases {
		n, ok := s.Held[owner]
		if !ok || i%max(step, 1) != 0 {
			continue
		}
		fmt.Fprintf(w, "| %.0f | %d | %s |\n", s.At, n, offerCells(s.Offers[owner]))
	}
}

// steadyFrom says when the steady state starts.
func steadyFrom(s float64) string {
	if s < 0 {
		return "the end (no steady state: 90% of the open shards never leased)"
	}
	return fmt.Sprintf("%.0f s", s)
}

// caughtUpFrom says when the caught-up state starts: the later of the
// steady state's start and the end of the start's walk.
func caughtUpFrom(st LagStages) string {
	switch {
	case st.SteadyFrom < 0:
		return steadyFrom(st.SteadyFrom)
	case st.WalkedAt < 0:
		return "the end (no caught-up state: the live fleet never got the end of every shard closed at the start)"
	}
	return fmt.Sprintf("%.0f s", max(st.SteadyFrom, st.WalkedAt))
}

func drained(r *FleetResult) string {
	if r.Drained {
		return fmt.Sprintf(" (drain %s)", r.DrainTook.Round(time.Second))
	}
	return " (the drain did not finish: see errors)"
}

func secondsOrNever(s float64) string {
	if s < 0 {
		return "not within the span"
	}
	return fmt.Sprintf("%.0f s", s)
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func dollars(v float64) string { return fmt.Sprintf("$%.2f", v) }

// shortKey shortens a stream's partition key (STREAM#arn) for a table.
func shortKey(pk string) string {
	if len(pk) <= 40 {
		return pk
	}
	return pk[:18] + "…" + pk[len(pk)-18:]
}
