package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Issue 25's randomized test, the poller's variant (docs/exactly-once.md,
// "R as built (session 26)", "The randomized test with kills (session
// 27)"). Three branches of two tenants are rebased (processor.Rebase, as
// `ledgerctl reconcile --repair --rebase` runs it), so that the counted
// repair applies; then, for a few seconds, a writer writes to them as the
// writer does (creates, edits, edits reverted at once, deletes, creates
// deleted at once, re-creates), while at random moments reports are
// damaged, counted repairs run (processor.CountedRepair, as `ledgerctl
// reconcile --repair` runs it for a rebased branch) and the built poller
// is killed with SIGKILL and started again. After the writer stops, a
// --drain poller drains the stream; then every difference must be in a
// report that was damaged (a repair that wrote a wrong figure leaves it
// wrong for good, damaged or not), one more repair of each branch must
// prove it, and reconcile must find 0 differences. Every repair either
// proved (and wrote, or had nothing to write) or refused by a reason a
// writer-only workload can cause; some must have written.
// LEDGER_SEEDS picks the seeds (default 1); LEDGER_CHAOS_SECONDS the
// time each seed's world runs (default 8).
func TestPoller_CountedRepairsAtRandomMomentsWhileKilled(t *testing.T) {
	ctx := context.Background()
	db := ddbtest.Client(t)
	tbl := newTableName(t)
	pollerBinary(t)
	info, err := table.DescribeTable(ctx, db, tbl)
	require.NoError(t, err)
	seeds, err := ledgertest.Seeds(os.Getenv, 1)
	require.NoError(t, err)
	chaos, err := ledgertest.ChaosTime(os.Getenv, 8*time.Second)
	require.NoError(t, err)
	var tally ledgertest.RepairTally
	var kills, midBatch, differences int
	for _, seed := range seeds {
		k, m, d := killedPollerSeed(t, tbl, info.StreamARN, seed, chaos, &tally)
		kills += k
		midBatch += m
		differences += d
		if t.Failed() {
			t.Fatalf("seed %d failed (replay: LEDGER_SEEDS=%d)", seed, seed)
		}
	}
	t.Logf("%d seeds: %s; %d kills (%d left a batch half-committed); %d differences after the final repair", len(seeds), tally.String(), kills, midBatch, differences)
	assert.Empty(t, tally.Unexpected, "refusals a writer-only workload cannot cause")
	assert.Positive(t, tally.Wrote, "no repair wrote: the test proved nothing")
}

// pollerFlags make the poller quick to pick up and commit: short idle
// waits and a short batch window (edits and their reverts still land in
// one batch often).
var pollerFlags = []string{"--idle-backoff", "50ms", "--max-idle-backoff", "200ms", "--batch-window", "250ms"}

func killedPollerSeed(t *testing.T, tbl, streamARN string, seed uint64, chaos time.Duration, tally *ledgertest.RepairTally) (kills, midBatch, differences int) {
	t.Helper()
	ctx := context.Background()
	db := ddbtest.Client(t)
	rng := rand.New(rand.NewPCG(seed, 25))
	branches := []processor.Scope{
		{Tenant: "acme", Branch: fmt.Sprintf("n%d", seed)},
		{Tenant: "acme", Branch: fmt.Sprintf("s%d", seed)},
		{Tenant: "globex", Branch: fmt.Sprintf("e%d", seed)},
	}
	churn := ledgertest.NewChurn(seed, branches...)
	require.NoError(t, churn.Seed(ctx, db, tbl, 2))
	gen := 0
	start := func() *proc {
		gen++
		return startPoller(t, tbl, fmt.Sprintf("s%d-%d", seed, gen), pollerFlags...)
	}
	p := start()
	for _, b := range branches {
		res, err := processor.Rebase(ctx, db, tbl, processor.RebaseOptions{Tenant: b.Tenant, Branch: b.Branch,
			StreamARN: streamARN, Wait: time.Minute, Poll: 50 * time.Millisecond})
		require.NoError(t, err, "rebase %s/%s", b.Tenant, b.Branch)
		require.Positive(t, res.Keys)
	}

	// The writer.
	wroteBefore := tally.Written()
	quit := make(chan struct{})
	wrote := make(chan error, 1)
	go func() { wrote <- churn.RunInBursts(ctx, db, tbl, rand.New(rand.NewPCG(seed, 26)), quit) }()

	// Repairs, damage and kills at random moments; repairs also run
	// concurrently with one another.
	damaged := map[aggregates.ReportKey]bool{}
	heavy := map[processor.Scope]bool{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var repairErrs []error
	for end := time.Now().Add(chaos); time.Now().Before(end); {
		time.Sleep(time.Duration(20+rng.IntN(250)) * time.Millisecond)
		b := branches[rng.IntN(len(branches))]
		switch r := rng.IntN(100); {
		case r < 50:
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := tally.Repair(ctx, db, tbl, streamARN, b); err != nil {
					mu.Lock()
					repairErrs = append(repairErrs, err)
					mu.Unlock()
				}
			}()
		case r < 70:
			h := !heavy[b] && rng.IntN(3) == 0
			heavy[b] = heavy[b] || h
			keys, err := ledgertest.Hurt(ctx, db, tbl, b, rng, h)
			require.NoError(t, err)
			for _, k := range keys {
				damaged[k] = true
			}
		case r < 80 && time.Since(p.started) > time.Second:
			p.kill(t)
			kills++
			if halfCommitted(t, tbl, streamARN) {
				midBatch++
			}
			if rng.IntN(2) == 0 {
				time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
			}
			p = start()
		}
	}
	// The writer stops; repairs and damage go on for a while (no kill),
	// until a repair of this seed wrote (at most 10 s): on a busy machine
	// the poller may not catch up during the writer's quiet spells.
	close(quit)
	require.NoError(t, <-wrote)
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && tally.Written() == wroteBefore; {
		time.Sleep(time.Duration(20+rng.IntN(250)) * time.Millisecond)
		b := branches[rng.IntN(len(branches))]
		if rng.IntN(10) < 7 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := tally.Repair(ctx, db, tbl, streamARN, b); err != nil {
					mu.Lock()
					repairErrs = append(repairErrs, err)
					mu.Unlock()
				}
			}()
			continue
		}
		keys, err := ledgertest.Hurt(ctx, db, tbl, b, rng, false)
		require.NoError(t, err)
		for _, k := range keys {
			damaged[k] = true
		}
	}
	wg.Wait()
	require.Empty(t, repairErrs, "repairs that neither proved nor refused")
	p.kill(t)
	kills++
	if halfCommitted(t, tbl, streamARN) {
		midBatch++
	}

	// The final drain.
	d := startPoller(t, tbl, fmt.Sprintf("s%d-drain", seed), append([]string{"--drain"}, pollerFlags...)...)
	require.Equal(t, 0, d.wait(t, 2*time.Minute), d.logs.String())

	// Only damaged reports may differ: no repair wrote a wrong figure.
	for _, b := range branches {
		diffs, _, err := processor.Reconcile(ctx, db, tbl, b)
		require.NoError(t, err)
		for _, df := range diffs {
			assert.True(t, damaged[df.Report], "seed %d: %s differs and was never damaged: a repair wrote a wrong figure: %s", seed, df.Report, df)
		}
		differences += len(diffs)
	}
	t.Logf("seed %d: writer %v (%d records); %d reports damaged, %d differences after the drain; %d kills (%d left a batch half-committed); all seeds so far: %s",
		seed, churn.Counts, churn.Records, len(damaged), differences, kills, midBatch, tally.String())

	// One more repair of each branch proves it; then nothing differs.
	differences = 0
	for _, b := range branches {
		res, err := processor.CountedRepair(ctx, db, tbl, processor.CountedRepairOptions{Tenant: b.Tenant, Branch: b.Branch, StreamARN: streamARN})
		require.NoError(t, err, "seed %d: the final repair of %s/%s", seed, b.Tenant, b.Branch)
		require.Equal(t, res.A, res.W)
		diffs, _, err := processor.Reconcile(ctx, db, tbl, b)
		require.NoError(t, err)
		for _, df := range diffs {
			t.Errorf("seed %d: after the final repair: %s", seed, df)
		}
		differences += len(diffs)
	}
	return kills, midBatch, differences
}

// halfCommitted reports whether a shard's checkpoint holds a pending
// batch: the poller just killed died in the middle of a commit.
func halfCommitted(t *testing.T, tbl, streamARN string) bool {
	t.Helper()
	ctx := context.Background()
	out, err := dynamodbstreams.NewFromConfig(ddbtest.Config(t)).DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &streamARN})
	require.NoError(t, err)
	coord := table.CoordinationTableName(tbl)
	for _, sh := range out.StreamDescription.Shards {
		id := aws.ToString(sh.ShardId)
		got, err := ddbtest.Client(t).GetItem(ctx, &dynamodb.GetItemInput{TableName: &coord, Key: table.Key(aggregates.CheckpointKey(streamARN, id)), ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		if cp, err := table.DecodeCheckpoint(id, got.Item); err == nil && cp.Pending != nil {
			return true
		}
	}
	return false
}
