package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
)

// testCountedRepairsWithKills is issue 25's randomized test, the tumbling
// Lambda's variant (docs/exactly-once.md, "R as built (session 26)", "The
// randomized test with kills (session 27)"; the poller's is in cmd/poller).
// Three branches of two tenants are rebased (processor.Rebase, as
// `ledgerctl reconcile --repair --rebase` runs it, while the function
// commits its probes), so that the counted repair applies. Then, for a few
// seconds, a writer writes to them as the writer does (creates, edits,
// edits reverted at once, deletes, creates deleted at once, re-creates:
// the pairs often in one window, which then nets to zero on a report),
// while at random moments reports are damaged and counted repairs run
// (processor.CountedRepair, as `ledgerctl reconcile --repair` runs it for
// a rebased branch), and the simulated event source mapping delivers the
// stream to the built function in tumbling windows, killing its process
// mid-window (timed, or at a DynamoDB call before or after it lands) and
// failing DynamoDB under it. After the writer stops, a last delivery
// drains the stream; then every difference must be in a report that was
// damaged (a repair that wrote a wrong figure leaves it wrong for good),
// one more repair of each branch must prove it, and reconcile must find 0
// differences. Every repair either proved or refused by a reason a
// writer-only workload can cause; some must have written. LEDGER_SEEDS
// picks the seeds (default 1); LEDGER_CHAOS_SECONDS the time each seed's
// world runs (default 8).
func testCountedRepairsWithKills(t *testing.T, bin string) {
	table := newTable(t)
	s := newStream(t, table)
	proxy := newFaultProxy(t, ddbtest.Endpoint(t))
	api := newRuntimeAPI(t)
	api.controlPlane.set(safeMapping("esm-1", "tumbling"))
	fn := newFunction(t, bin, api, lambdaEnv(api, proxy.srv.URL, table,
		"LEDGER_LAMBDA_MODE=tumbling", "LEDGER_MAX_ITEMS_PER_RUN=12", "LEDGER_BATCH_RECORDS=100"))
	proxy.kill = fn.kill
	fn.start()
	seeds, err := ledgertest.Seeds(os.Getenv, 1)
	require.NoError(t, err)
	chaos, err := ledgertest.ChaosTime(os.Getenv, 8*time.Second)
	require.NoError(t, err)
	var tally ledgertest.RepairTally
	// A fifth of the invocations killed at a random moment (the default
	// twentieth leaves a seed without a kill now and then on a busy
	// machine: carrying invocations answer within milliseconds).
	e := &esm{t: t, fn: fn, api: api, proxy: proxy, arn: s.arn, stats: map[string]int{}, timedKills: 20}
	// The stream, read on from where the last read ended (many seeds make
	// a long one), delivered from the first record not yet delivered.
	var recs []events.DynamoDBEventRecord
	after := map[string]string{}
	deliver := func() {
		shards, err := ledgertest.ReadAll(context.Background(), s.streams, s.arn, after)
		require.NoError(t, err)
		require.Len(t, shards, 1)
		from := len(recs)
		for _, r := range shards[0].Records {
			ev, err := processor.ToLambda(r)
			require.NoError(t, err)
			recs = append(recs, ev)
		}
		if n := len(recs); n > 0 {
			e.shard, after[shards[0].ID] = shards[0].ID, recs[n-1].Change.SequenceNumber
		}
		e.tumbling(recs, from)
	}
	differences := 0
	for _, seed := range seeds {
		e.rng = rand.New(rand.NewPCG(seed, 27))
		differences += countedRepairSeed(t, s, seed, chaos, deliver, &tally)
		if t.Failed() {
			t.Fatalf("seed %d failed (replay: LEDGER_SEEDS=%d)", seed, seed)
		}
	}
	t.Logf("%d seeds: %s; deliveries %v; %d processes; %d differences after the final repair",
		len(seeds), tally.String(), e.stats, fn.starts, differences)
	assert.Empty(t, tally.Unexpected, "refusals a writer-only workload cannot cause")
	assert.Positive(t, tally.Wrote, "no repair wrote: the test proved nothing")
	assert.Positive(t, e.stats["redelivered_after_kill"], "processes killed mid-window")
}

func countedRepairSeed(t *testing.T, s *stream, seed uint64, chaos time.Duration, deliver func(), tally *ledgertest.RepairTally) (differences int) {
	t.Helper()
	ctx := context.Background()
	branches := []processor.Scope{
		{Tenant: "acme", Branch: fmt.Sprintf("n%d", seed)},
		{Tenant: "acme", Branch: fmt.Sprintf("s%d", seed)},
		{Tenant: "globex", Branch: fmt.Sprintf("e%d", seed)},
	}
	churn := ledgertest.NewChurn(seed, branches...)
	require.NoError(t, churn.Seed(ctx, s.ddb, s.table, 2))
	deliver()

	// The rebases, while the mapping delivers their probes.
	rebased := make(chan error, 1)
	go func() {
		for _, b := range branches {
			if _, err := processor.Rebase(ctx, s.ddb, s.table, processor.RebaseOptions{Tenant: b.Tenant, Branch: b.Branch,
				StreamARN: s.arn, Wait: time.Minute, Poll: 50 * time.Millisecond}); err != nil {
				rebased <- fmt.Errorf("rebase %s/%s: %w", b.Tenant, b.Branch, err)
				return
			}
		}
		rebased <- nil
	}()
	for done := false; !done; {
		select {
		case err := <-rebased:
			require.NoError(t, err)
			done = true
		case <-time.After(50 * time.Millisecond):
			deliver()
		}
	}

	// The writer, and repairs and damage at random moments, while the
	// mapping delivers (and kills) in the foreground.
	quit, stopWriter := make(chan struct{}), make(chan struct{})
	wrote := make(chan error, 1)
	go func() { wrote <- churn.RunInBursts(ctx, s.ddb, s.table, rand.New(rand.NewPCG(seed, 28)), stopWriter) }()
	wroteBefore := tally.Written()
	damaged := map[aggregates.ReportKey]bool{}
	var chaosErrs []error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 29))
		heavy := map[processor.Scope]bool{}
		var repairs sync.WaitGroup
		var mu sync.Mutex
		defer repairs.Wait()
		for {
			select {
			case <-quit:
				return
			case <-time.After(time.Duration(20+rng.IntN(250)) * time.Millisecond):
			}
			b := branches[rng.IntN(len(branches))]
			if rng.IntN(10) < 7 {
				repairs.Add(1)
				go func() {
					defer repairs.Done()
					if _, err := tally.Repair(ctx, s.ddb, s.table, s.arn, b); err != nil {
						mu.Lock()
						chaosErrs = append(chaosErrs, err)
						mu.Unlock()
					}
				}()
				continue
			}
			h := !heavy[b] && rng.IntN(3) == 0
			heavy[b] = heavy[b] || h
			keys, err := ledgertest.Hurt(ctx, s.ddb, s.table, b, rng, h)
			mu.Lock()
			if err != nil {
				chaosErrs = append(chaosErrs, err)
			}
			for _, k := range keys {
				damaged[k] = true
			}
			mu.Unlock()
		}
	}()
	for end := time.Now().Add(chaos); time.Now().Before(end); {
		deliver()
		time.Sleep(20 * time.Millisecond)
	}
	// The writer stops; repairs, damage and kills go on for a while, until
	// a repair of this seed wrote (at most 10 s): on a busy machine the
	// function may not catch up during the writer's quiet spells.
	close(stopWriter)
	require.NoError(t, <-wrote)
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && tally.Written() == wroteBefore; {
		deliver()
		time.Sleep(20 * time.Millisecond)
	}
	close(quit)
	wg.Wait()
	require.Empty(t, chaosErrs, "repairs that neither proved nor refused, or damage that failed")

	// The final drain, then: only damaged reports may differ.
	deliver()
	for _, b := range branches {
		diffs, _, err := processor.Reconcile(ctx, s.ddb, s.table, b)
		require.NoError(t, err)
		for _, df := range diffs {
			assert.True(t, damaged[df.Report], "seed %d: %s differs and was never damaged: a repair wrote a wrong figure: %s", seed, df.Report, df)
		}
		differences += len(diffs)
	}
	t.Logf("seed %d: writer %v (%d records); %d reports damaged, %d differences after the drain; all seeds so far: %s",
		seed, churn.Counts, churn.Records, len(damaged), differences, tally.String())

	// One more repair of each branch proves it; then nothing differs.
	differences = 0
	for _, b := range branches {
		res, err := processor.CountedRepair(ctx, s.ddb, s.table, processor.CountedRepairOptions{Tenant: b.Tenant, Branch: b.Branch, StreamARN: s.arn})
		require.NoError(t, err, "seed %d: the final repair of %s/%s", seed, b.Tenant, b.Branch)
		require.Equal(t, res.A, res.W)
		diffs, _, err := processor.Reconcile(ctx, s.ddb, s.table, b)
		require.NoError(t, err)
		for _, df := range diffs {
			t.Errorf("seed %d: after the final repair: %s", seed, df)
		}
		differences += len(diffs)
	}
	return differences
}
