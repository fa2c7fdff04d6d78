package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ledger-dev/ledger/bench"
	"github.com/ledger-dev/ledger/processor/poller"
)

const fleetHelp = `usage: ledgerbench fleet [flags]

Runs issue 23's fleet benchmark (BENCHMARKS.md, "Issue 23: the fleet at
1,000 shards"): in-process pollers (the real processor/poller code) read an
emulation of AWS's stream (internal/streamemu: shards by partition key that
roll and split on a compressed clock, AWS's DynamoDB Streams limits) in
front of a fresh DynamoDB Local, while transactions are written at a steady
rate over every shard. One poller joins at a third of the run (or, if later,
once the fleet holds 90% of the open shards, at most at the run's end:
a join measured during the start measures the start) and the first leaves a third of the run after
the join, the writes going on a third of the run after that; then the fleet idles, is stopped, a drain finishes
what is left and the reconcile oracle checks the reports. It prints every
target's figure as markdown (exactness, balance, write units per partition
key, coordinator calls per poller, discovery, idle GetRecords, memory, lag).

Run it niced, one at a time: at 1,000 shards it keeps both cores busy.

  nice -n 19 ledgerbench fleet -shards 100
  nice -n 19 ledgerbench fleet -shards 1000
`

// runFleet runs the fleet subcommand.
func runFleet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, fail := subcommand("fleet", fleetHelp, stderr)
	shards := fs.Int("shards", 1000, "open `SHARDS` in the emulated stream")
	pollers := fs.Int("pollers", 8, "the fleet's size, `N` ≥ 2 (N-1 start, one joins, one leaves)")
	rate := fs.Int("rate", 100, "transactions written a `SECOND`, over every shard")
	duration := fs.Duration("duration", 2*time.Minute, "the steady phase, wall `TIME`")
	idle := fs.Duration("idle", 30*time.Second, "the idle phase after the last commit, wall `TIME`")
	compression := fs.Float64("compression", 24, "the stream's clock runs `FACTOR` times faster than the wall clock")
	history := fs.Duration("history", 24*time.Hour, "stream `TIME` played before the fleet starts (closed shards in the listing)")
	drain := fs.Duration("drain-timeout", 5*time.Minute, "bound on the final drain, `TIME`")
	seed := fs.Uint64("seed", 23, "workload and schedule `SEED`")
	out := fs.String("o", "", "also write the markdown to `FILE`")
	jsonOut := fs.String("json", "", "also write the results as JSON to `FILE`")
	verbose := fs.Bool("v", false, "progress and the pollers' warnings on stderr")
	maxIdle := fs.Duration("max-idle-backoff", poller.MaxIdleBackoffSetting.Default, "the pollers' `--max-idle-backoff` (an idle shard's longest wait between reads: the idle cost against the lag of a quiet shard's first write)")
	leaseMode := fs.String("lease-mode", string(poller.LeaseModeHeartbeat), "how the pollers keep their leases: `MODE` heartbeat (one worker-item write a round) or renew (every lease item a round, as before session 16)")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	switch {
	case fs.NArg() > 0:
		return fail(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	case *shards < 1 || *shards > 10_000:
		return fail(fmt.Errorf("-shards %d: want 1 to 10000", *shards))
	case *pollers < 2:
		return fail(fmt.Errorf("-pollers %d: want at least 2 (one joins, one leaves)", *pollers))
	case *rate < 1:
		return fail(fmt.Errorf("-rate %d: want at least 1", *rate))
	case *duration <= 0 || *idle <= 0 || *drain <= 0:
		return fail(fmt.Errorf("-duration, -idle and -drain-timeout must be positive"))
	case *compression < 1:
		return fail(fmt.Errorf("-compression %g: want at least 1", *compression))
	case *history < 0:
		return fail(fmt.Errorf("-history %s: want 0 or more", *history))
	case *maxIdle < poller.MaxIdleBackoffSetting.Min || *maxIdle > poller.MaxIdleBackoffSetting.Max:
		return fail(fmt.Errorf("-max-idle-backoff %s: want %s to %s", *maxIdle, poller.MaxIdleBackoffSetting.Min, poller.MaxIdleBackoffSetting.Max))
	case poller.LeaseMode(*leaseMode) != poller.LeaseModeHeartbeat && poller.LeaseMode(*leaseMode) != poller.LeaseModeRenew:
		return fail(fmt.Errorf("-lease-mode %q: want heartbeat or renew", *leaseMode))
	}
	cfg := bench.FleetConfig{Shards: *shards, Pollers: *pollers, Rate: *rate, Duration: *duration, IdleFor: *idle,
		Compression: *compression, History: *history, DrainTimeout: *drain, Seed: *seed, Log: stderr}
	if *history == 0 {
		cfg.History = -1
	}
	mode := poller.LeaseMode(*leaseMode)
	cfg.MaxIdleBackoff = *maxIdle
	cfg.Poller = func(c *poller.Config) { c.LeaseMode = mode }
	if !*verbose {
		cfg.Log = nil
	}
	res, err := bench.Fleet(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	res.Markdown(stdout)
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return fail(err)
		}
		res.Markdown(f)
		fmt.Fprintln(f, "\nLeases held by each poller, every 10 s:")
		fmt.Fprintln(f)
		res.LeaseTimeline(f, 10)
		if joiner := fmt.Sprintf("p%d", res.Pollers); res.Pollers > 1 {
			fmt.Fprintf(f, "\nThe joiner %s: what became of the leases offered to it (cumulative), every 5 s:\n\n", joiner)
			res.OfferTimeline(f, joiner, 5)
		}
		if err := f.Close(); err != nil {
			return fail(err)
		}
	}
	if err := writeJSONFile(*jsonOut, res); err != nil {
		return fail(err)
	}
	if len(res.Errors) > 0 {
		return fail(fmt.Errorf("the run is incomplete (its figures are above): %s", strings.Join(res.Errors, "; ")))
	}
	return exitOK
}
