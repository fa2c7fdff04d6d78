package bench

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ledger-dev/ledger/aggregates"
)

// PartitionWCU is one partition's write ceiling, units a second
// (docs/design.md, "Tenant roll-ups": "Each individual partition is
// limited to 1,000 write units per second").
const PartitionWCU = 1000

// RollupBound is hole 8's bound (docs/exactly-once.md, "Tenant roll-ups",
// hole 8) from one cell's measured per-commit costs: at how many commits a
// second a lane key and a partial key reach a partition's ceiling.
type RollupBound struct {
	// BranchCommits is the commits that wrote branch reports (each puts
	// its roll-up deltas: stage 1); the others fold deltas (stage 2).
	BranchCommits int
	// LaneUnitsPerCommit is the lane units (the delta puts and, later,
	// their deletes by the folds: both in the lane keys) per branch-report
	// commit, all lanes together.
	LaneUnitsPerCommit float64
	// DeltaPutsPerCommit is the lane items put per branch-report commit
	// (half the lane item writes: each put is deleted by its fold).
	DeltaPutsPerCommit float64
	// PartialUnitsPerTouch is the units one commit writes to one partial
	// key (its periods' partial and entry items), on average.
	PartialUnitsPerTouch float64
	// TableCommits is the branch-report commits a second of the whole
	// table (every shard's committers together) at which the average lane
	// key reaches PartitionWCU: a commit's lane is a hash of its claim, so
	// the commits spread over the K lanes.
	TableCommits float64
	// LaneShardCommits is the commits a second of one lane key's committer
	// (the shard holding it) at which its partial keys reach PartitionWCU.
	LaneShardCommits float64
}

// Bound computes the bound from a cell with roll-ups on.
func (r RollupCostRow) Bound() RollupBound {
	lane, partial := r.Kinds[KindLane], r.Kinds[KindPartial]
	b := RollupBound{BranchCommits: r.Kinds[KindBranch].Transactions}
	if b.BranchCommits > 0 {
		b.LaneUnitsPerCommit = float64(lane.Units) / float64(b.BranchCommits)
		b.DeltaPutsPerCommit = float64(lane.Writes) / 2 / float64(b.BranchCommits)
	}
	if partial.KeyTouches > 0 {
		b.PartialUnitsPerTouch = float64(partial.Units) / float64(partial.KeyTouches)
	}
	if b.LaneUnitsPerCommit > 0 {
		b.TableCommits = PartitionWCU * aggregates.RollupLanes / b.LaneUnitsPerCommit
	}
	if b.PartialUnitsPerTouch > 0 {
		b.LaneShardCommits = PartitionWCU / b.PartialUnitsPerTouch
	}
	return b
}

func days(n int) string {
	if n == 1 {
		return "one business day, 5% backdated up to 60 days"
	}
	return fmt.Sprintf("%d days", n)
}

func pct(units int) string { return fmt.Sprintf("%d (%.0f%%)", units, float64(units)*100/PartitionWCU) }

// Markdown writes the run's figures.
func (res *RollupCostResult) Markdown(w io.Writer) {
	cfg := res.Config
	fmt.Fprintf(w, "Run %s (%s), %d CPUs, load %s before and %s after; %s; %s.\n\n",
		res.Started.UTC().Format("2006-01-02 15:04 UTC"), res.Duration.Round(time.Second), res.Machine.CPUs,
		res.Machine.LoadBefore, res.Machine.LoadAfter, res.Machine.GoVersion, res.Machine.DynamoDBLocal)
	if cfg.Command != "" {
		fmt.Fprintf(w, "`%s`\n\n", cfg.Command)
	}
	fmt.Fprintf(w, "Workload c: %d changes (1,000 branches, %s, 10%% modifies, 5%% deletes; branch n in %s by n mod 3), seed %d. "+
		"Live: written at %d changes a second while the pollers run; catch-up: written first, drained at full speed. "+
		"Up to %d pollers (one per shard at most), the emulated stream's AWS limits, batching window 1 s, idle backoff 500 ms.\n\n",
		cfg.Changes, days(cfg.Days), strings.Join(RollupCurrencies, "/"), cfg.Seed, cfg.Rate, cfg.Pollers)

	fmt.Fprintln(w, "#### Write units per 1,000 changes, roll-ups on and off (billed: transactional actions twice)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| phase | shards | roll-ups | changes/s written | commits (/s mean, peak; by the final drain) | WCU / 1k changes | branch reports | roll-up deltas | roll-up staging | roll-up partials | applied counts | coordination (in commits / outside) | other | roll-up share | reconcile differences |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range res.Rows {
		on := "off"
		if r.Rollups {
			on = "on"
		}
		written := "backlog"
		if r.Phase == "live" {
			written = fmt.Sprintf("%.0f", r.WriteRate)
		}
		k := func(name string) string { return fmt.Sprintf("%.0f", r.PerThousand(r.Kinds[name].Units)) }
		co := r.Kinds[KindCoordination]
		share := "—"
		if off, ok := res.pair(r); ok && r.Rollups {
			share = fmt.Sprintf("+%.0f (+%.0f%%)", r.PerThousand(r.Units)-off.PerThousand(off.Units), 100*(r.PerThousand(r.Units)/off.PerThousand(off.Units)-1))
		}
		diffs := fmt.Sprint(r.Differences)
		if r.Waiting > 0 {
			diffs += fmt.Sprintf(" (%d deltas waiting)", r.Waiting)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %d (%.1f, %d; %d) | %.0f | %s | %s | %s | %s | %s | %.0f / %.0f | %s | %s | %s |\n",
			r.Phase, r.Shards, on, written, r.Commits, r.CommitsPerSecond(), r.PeakCommits, r.DrainCommits, r.PerThousand(r.Units),
			k(KindBranch), k(KindLane), k(KindStaging), k(KindPartial), k(KindApplied), r.PerThousand(co.TxUnits), r.PerThousand(co.Units-co.TxUnits), k(KindOther), share, diffs)
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "#### The busiest partition key of each kind: write units in its busiest second (% of a partition's 1,000)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| phase | shards | roll-ups | commits/s (mean, peak) | roll-up delta (lane) key | roll-up staging key | roll-up partial key | branch report key | applied key | coordination key | keys written: lanes / staging / partials / branch reports / applied / coordination |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range res.Rows {
		on := "off"
		if r.Rollups {
			on = "on"
		}
		hot := func(kind string) string {
			k, ok := r.Hot[kind]
			if !ok {
				return "—"
			}
			return pct(k.Peak)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %.1f, %d | %s | %s | %s | %s | %s | %s | %d / %d / %d / %d / %d / %d |\n", r.Phase, r.Shards, on, r.CommitsPerSecond(), r.PeakCommits,
			hot(KindLane), hot(KindStaging), hot(KindPartial), hot(KindBranch), hot(KindApplied), hot(KindCoordination),
			r.Keys[KindLane], r.Keys[KindStaging], r.Keys[KindPartial], r.Keys[KindBranch], r.Keys[KindApplied], r.Keys[KindCoordination])
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "#### Hole 8: the bound in commits a second, from the measured per-commit costs (roll-ups on)")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| phase | shards | commits (of them branch-report commits) | lane WCU per branch-report commit (its delta puts and their fold deletes, all %d lanes) | delta items put per branch-report commit | partial WCU per commit and partial key | branch-report commits/s of the table at which the average lane key reaches 1,000 WCU/s | a lane shard's commits/s at which its partial key reaches 1,000 WCU/s |\n", aggregates.RollupLanes)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range res.Rows {
		if !r.Rollups {
			continue
		}
		b := r.Bound()
		fmt.Fprintf(w, "| %s | %d | %d (%d) | %.1f | %.2f | %.1f | %.0f | %.0f |\n", r.Phase, r.Shards, r.Commits, b.BranchCommits, b.LaneUnitsPerCommit, b.DeltaPutsPerCommit,
			b.PartialUnitsPerTouch, b.TableCommits, b.LaneShardCommits)
	}
	fmt.Fprintln(w)
	for _, e := range res.Errors {
		fmt.Fprintf(w, "Error: %s\n", e)
	}
	for _, r := range res.Rows {
		if r.MeterErr != "" {
			fmt.Fprintf(w, "Meter (%s, %d shards, roll-ups %v): %s\n", r.Phase, r.Shards, r.Rollups, r.MeterErr)
		}
	}
}

// pair returns the row of the same phase and shards with roll-ups off.
func (res *RollupCostResult) pair(r RollupCostRow) (RollupCostRow, bool) {
	for _, o := range res.Rows {
		if o.Phase == r.Phase && o.Shards == r.Shards && o.Rollups != r.Rollups && !o.Rollups && o.Units > 0 {
			return o, true
		}
	}
	return RollupCostRow{}, false
}
