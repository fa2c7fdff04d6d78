package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ledger-dev/ledger/bench"
)

const rollupsHelp = `usage: ledgerbench rollups [flags]

Runs issue 24's roll-up cost benchmark on the real consumers (BENCHMARKS.md,
"Issue 24: roll-up cost on the real consumers"): workload c (1,000 branches,
BRL/EUR/JPY by branch) consumed by in-process pollers reading an emulated
stream of 1, 4 and 16 shards (internal/streamemu) in front of one fresh
DynamoDB Local, every consumer write billed by the write meter. Each shard
count runs with roll-ups on and off (the consumers' --rollups=false) on the
same changes, live (written at -rate while the pollers run) and as a
backlog drained at full speed (catch-up, issue 24's hole 8). It prints, as
markdown: write units per 1,000 changes split by item kind, the busiest
partition key of each kind in its busiest second, and hole 8's bound in
commits a second from the measured per-commit costs; reconcile (roll-ups
judged) after every cell.

Run it niced, one at a time:

  nice -n 19 ledgerbench rollups
  nice -n 19 ledgerbench rollups -phase catch-up -changes 10000
`

// runRollups runs the rollups subcommand.
func runRollups(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, fail := subcommand("rollups", rollupsHelp, stderr)
	shards := fs.String("shards", "1,4,16", "the emulated stream's shard `COUNTS`, comma-separated")
	changes := fs.Int("changes", 3000, "workload c's `CHANGES` per cell")
	rate := fs.Int("rate", 100, "the live phase's changes a `SECOND`")
	days := fs.Int("days", 1, "the changes' dates span `DAYS` (1: one live business day, as the layout model)")
	pollers := fs.Int("pollers", 4, "most `POLLERS` per cell (at most one per shard)")
	phase := fs.String("phase", "both", "`PHASE`: live, catch-up or both")
	seed := fs.Uint64("seed", 24, "workload `SEED`")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on each cell's wait for its consumers, `TIME`")
	out := fs.String("o", "", "also write the markdown to `FILE`")
	jsonOut := fs.String("json", "", "also write the results as JSON to `FILE`")
	verbose := fs.Bool("v", false, "progress and the pollers' warnings on stderr")
	from := fs.String("from", "", "measure nothing: print the markdown of the results `FILE` a run wrote with -json")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if *from != "" {
		raw, err := os.ReadFile(*from)
		if err != nil {
			return fail(err)
		}
		var res bench.RollupCostResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return fail(fmt.Errorf("%s: %w", *from, err))
		}
		res.Markdown(stdout)
		return exitOK
	}
	cfg := bench.RollupCostConfig{Changes: *changes, Days: *days, Rate: *rate, Pollers: *pollers, Seed: *seed, Timeout: *timeout, Log: stderr,
		Command: "ledgerbench rollups " + strings.Join(args, " ")}
	for _, f := range strings.Split(*shards, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1024 {
			return fail(fmt.Errorf("-shards %q: want counts from 1 to 1024, comma-separated", *shards))
		}
		cfg.Shards = append(cfg.Shards, n)
	}
	switch {
	case fs.NArg() > 0:
		return fail(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	case *changes < 1 || *rate < 1 || *pollers < 1 || *days < 1:
		return fail(fmt.Errorf("-changes, -rate, -pollers and -days must be at least 1"))
	case *timeout <= 0:
		return fail(fmt.Errorf("-timeout %s: want a positive duration", *timeout))
	}
	switch *phase {
	case "live":
		cfg.Live = true
	case "catch-up":
		cfg.CatchUp = true
	case "both":
		cfg.Live, cfg.CatchUp = true, true
	default:
		return fail(fmt.Errorf("-phase %q: want live, catch-up or both", *phase))
	}
	if !*verbose {
		cfg.Log = nil
	}
	res, err := bench.RollupCost(ctx, cfg)
	if res != nil {
		res.Markdown(stdout)
	}
	if err != nil {
		return fail(err)
	}
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return fail(err)
		}
		res.Markdown(f)
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
	for _, r := range res.Rows {
		if r.Differences > 0 {
			return fail(fmt.Errorf("%s, %d shards, roll-ups %v: %d reconcile differences", r.Phase, r.Shards, r.Rollups, r.Differences))
		}
	}
	return exitOK
}
