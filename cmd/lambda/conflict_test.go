package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ddbconflict"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// testTumblingShardsUnderConflicts runs the tumbling-window function on
// several shards of the emulated stream (rolls, splits, windows of every
// shard interleaved, processes killed) with AWS's transaction conflicts
// emulated in front of DynamoDB Local (internal/ddbconflict, a 15 ms hold
// per transaction): the function's commits, and its checkpoint moves
// outside a commit, meet an interferer that holds random checkpoint and
// report items in transactions, as a take-over's stale committer or a
// repair does on AWS. Then the reports equal the fold of the table, no
// commit failed, and the function counted exactly the cancellations the
// emulation made of its transactions
// (ledger_aggregate_conflicts_total{reason="transaction_conflict"} in its
// EMF lines), bounded by the interferer's holds.
func testTumblingShardsUnderConflicts(t *testing.T, bin string, seed uint64) {
	ctx := context.Background()
	table := newTable(t)
	s := newStream(t, table)
	stream, err := streamemu.New(poller.NewStreamsClient(ddbtest.Config(t)), streamemu.Config{
		StreamARN: s.arn, Shards: 4, RollRecords: 60, SplitRatio: 0.4, MaxOpenShards: 8, Seed: seed,
	})
	require.NoError(t, err)
	srv := httptest.NewServer(streamemu.Handler(stream))
	t.Cleanup(srv.Close)

	emu := &ddbconflict.Transport{Next: http.DefaultTransport, Latency: 15 * time.Millisecond}
	proxy := newFaultProxy(t, ddbtest.Endpoint(t))
	proxy.ft.Next = emu // kills and faults first: a dead process's call never reaches "AWS"
	intf := &ddbconflict.Interferer{
		API:    ddbtest.Client(t, infra.WithTransportWrapper(func(http.RoundTripper) http.RoundTripper { return emu })),
		Tables: []string{table, ledgertable.CoordinationTableName(table)}, EntityTypes: []string{aggregates.EntityReport, aggregates.EntityCheckpoint, aggregates.EntityApplied, ledgertable.EntityRollupDelta},
		Pause: 10 * time.Millisecond, Seed: seed,
	}
	ictx, stopInterferer := context.WithCancel(ctx)
	idone := make(chan error, 1)
	go func() { idone <- intf.Run(ictx) }()
	t.Cleanup(stopInterferer)

	api := newRuntimeAPI(t)
	api.controlPlane.set(safeMapping("esm-1", "tumbling"))
	fn := newFunction(t, bin, api, lambdaEnv(api, proxy.srv.URL, table,
		"AWS_ENDPOINT_URL_DYNAMODB_STREAMS="+srv.URL,
		"LEDGER_LAMBDA_MODE=tumbling", "LEDGER_MAX_ITEMS_PER_RUN=12", "LEDGER_BATCH_RECORDS=100",
		// The tests' backoffs are 1–20 ms (production's 25 ms–3 s); 40
		// attempts of up to 250 ms span about 4 s, so they outlast a hold
		// as long as a loaded DynamoDB Local's answer (the interferer's
		// holds measured up to 623 ms, session 24; 40 at 20 ms span 0.4 s),
		// as production's 10 do on AWS (about 4.6 s).
		"LEDGER_MAX_ATTEMPTS=40", "LEDGER_MAX_BACKOFF=250ms"))
	proxy.kill = fn.kill
	fn.start()
	m := &shardedESM{
		esm:    &esm{t: t, rng: rand.New(rand.NewPCG(seed, 23)), fn: fn, api: api, proxy: proxy, arn: s.arn, stats: map[string]int{}, killsOnly: true},
		emu:    stream,
		shards: map[string]*emuShard{},
		clock:  time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	w := ledgertest.NewWorkload(seed)
	// A chain (issue 24's roll-up proof): one tenant of 200 branches in 3
	// currencies (BRL, JPY, BHD: 2, 0 and 3 fraction digits) and 3 time
	// zones with their own business-day cut-offs.
	chain := ledgertest.NewChain("chain", 200)
	chain.Apply(w)
	require.NoError(t, chain.WriteBranches(ctx, s.ddb, table))
	const rounds, steps = 6, 100
	for round := 0; round < rounds+2; round++ {
		if round < rounds {
			require.NoError(t, w.Run(ctx, s.ddb, table, steps))
		}
		m.read(ctx)
		m.deliver()
	}
	// Conflicts need commits: until one has met a held item and was
	// counted, write on. Whether a commit meets a hold is chance (fewer of
	// both on a loaded machine), and a killed process takes its counts with
	// it: these rounds kill nothing.
	m.calm = true
	for extra := 0; emfSum(fn, "ledger_aggregate_conflicts_total{reason=transaction_conflict}") == 0; extra++ {
		require.Less(t, extra, 100, "no commit met a held item in 100 more rounds")
		require.NoError(t, w.Run(ctx, s.ddb, table, 20))
		m.read(ctx)
		m.deliver()
	}
	m.read(ctx) // the function's own writes of the last round
	m.deliver()
	stopInterferer()
	require.NoError(t, <-idone)

	rs := s.requireReconciled(t)
	assert.Equal(t, w.Live(), rs.Transactions)
	// The tenant roll-ups: the last commits' deltas come back as records;
	// delivered until none waits in a lane, then reconcile with the
	// roll-ups judged finds them equal to the sum of the branch folds.
	deliveries := 0
	var rdiffs []processor.Difference
	for {
		var rst processor.ReconcileStats
		rdiffs, rst, err = processor.ReconcileWith(ctx, s.ddb, table, processor.Scope{}, processor.ReconcileOptions{Rollups: true})
		require.NoError(t, err)
		if rst.RollupWaiting[chain.Tenant] == 0 {
			assert.Empty(t, rst.Unsettled, "stamps as the branches' calendars give them")
			break
		}
		require.Less(t, deliveries, 5, "roll-up deltas still waiting after 5 more deliveries: %v", rst.RollupWaiting)
		deliveries++
		m.read(ctx)
		m.deliver()
	}
	for _, d := range rdiffs {
		t.Errorf("reconcile difference (roll-ups judged): %s", d)
	}
	assert.Empty(t, stream.EarlyReads(), "no child read before its parent's end")

	var conflicts, failed, committed, moveConflicts float64
	for _, l := range fn.emfLines() {
		for k, v := range l {
			f, _ := v.(float64)
			switch {
			case k == "ledger_aggregate_conflicts_total{reason=transaction_conflict}":
				conflicts += f
			case k == "ledger_commits_total{outcome=failed}":
				failed += f
			case k == "ledger_commits_total{outcome=committed}":
				committed += f
			case strings.HasPrefix(k, "ledger_dynamodb_retries_total{") && strings.Contains(k, "reason=conflict"):
				moveConflicts += f
			}
		}
	}
	cancelled, rejected := emu.Stats()
	sent, interfererCancelled := intf.Stats()
	t.Logf("%d shards, %d processes; %v commits, %v transaction conflicts counted, %v single-item writes retried after a conflict, %v commits failed; emulation: %d transactions cancelled (%d the interferer's, of %d it sent), %d single-item writes refused; delivery %v",
		len(m.order), fn.starts, committed, conflicts, moveConflicts, failed, cancelled, interfererCancelled, sent, rejected, m.stats)
	folded := emfSum(fn, "ledger_records_total{event=INSERT,outcome=rollup}")
	t.Logf("roll-ups: %v roll-up deltas folded (in the lines of processes not killed), %d more deliveries until none waited; %d transactions, %d branch reports", folded, deliveries, rs.Transactions, rs.Reports)
	assert.Positive(t, folded, "roll-up deltas folded")
	assert.Zero(t, failed, "commits failed")
	assert.Positive(t, committed)
	assert.Positive(t, conflicts, "conflicts met and counted")
	// A killed process's counts die with it: what the lines carry is at
	// most what the emulation did to the function's transactions.
	assert.LessOrEqual(t, conflicts, float64(cancelled-int64(interfererCancelled)), "counted against the emulation's cancellations")
	assert.LessOrEqual(t, moveConflicts, float64(rejected), "single-item conflicts counted against the emulation's refusals")
	// Each hold cancels fewer than 40 attempts of the one commit naming its
	// item, or that commit would have failed.
	holds := float64(sent - interfererCancelled)
	assert.LessOrEqual(t, conflicts, 39*holds, "conflicts per interferer hold")
	t.Logf("conflicts per interferer hold: %.2f", conflicts/holds)
}

// emfSum sums the metric key over the function's EMF lines.
func emfSum(fn *function, key string) float64 {
	sum := 0.0
	for _, l := range fn.emfLines() {
		if v, ok := l[key].(float64); ok {
			sum += v
		}
	}
	return sum
}
