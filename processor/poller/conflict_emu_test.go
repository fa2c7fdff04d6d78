package poller_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
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
	"github.com/ledger-dev/ledger/table"
)

// fleetAttempts and fleetMaxBackoff are the commit budget of the fleet
// under conflicts. The budget is a count of attempts, and what it must
// outlast is a time: an interferer's hold, which lasts DynamoDB Local's
// answer plus 15 ms, and on a loaded machine DynamoDB Local answers in
// seconds now and then. Every attempt meeting the held item is cancelled
// at once without reaching DynamoDB Local, so at the tests' usual
// backoffs (1–20 ms, full jitter) 40 attempts span about 0.4 s, and one
// loaded CI run failed a commit (before the commits counted a cancelled
// context apart); production's 10 attempts at 25 ms–3 s span about 4.6 s
// on average. With 250 ms the 40 span about 4 s, as production's do (its
// backoff a little faster at first), and no hold a loaded DynamoDB Local
// made in these runs came near (the test logs the longest).
const (
	fleetAttempts   = 40
	fleetMaxBackoff = 250 * time.Millisecond
)

// awsLatency is how long the conflict emulation keeps a transaction's
// items after DynamoDB Local answered it: AWS's transaction round trip.
const awsLatency = 15 * time.Millisecond

// newConflicts is one AWS for every client of a test: the transaction
// conflicts of internal/ddbconflict in front of DynamoDB Local.
func newConflicts(latency time.Duration) *ddbconflict.Transport {
	return &ddbconflict.Transport{Next: awshttp.NewBuildableClient().GetTransport(), Latency: latency}
}

// conflictClient is a client (no SDK retries) whose calls go through emu,
// and fail without reaching it once dead says so (nil: never), as if its
// process had died.
func conflictClient(t testing.TB, emu *ddbconflict.Transport, dead func() bool) *dynamodb.Client {
	t.Helper()
	ft := &ledgertest.FaultTransport{Next: emu, Decide: func(string) ledgertest.Fault {
		if dead != nil && dead() {
			return ledgertest.Drop
		}
		return ledgertest.Pass
	}}
	cfg := ddbtest.Config(t, infra.WithTransportWrapper(func(http.RoundTripper) http.RoundTripper { return ft }))
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
}

// sumCounter sums one label value of a counter vector over pollers.
func sumCounter(t *testing.T, pollers []*testPoller, get func(*processor.Metrics) float64) float64 {
	t.Helper()
	sum := 0.0
	for _, tp := range pollers {
		sum += get(tp.pm)
	}
	return sum
}

// Four pollers on the emulated multi-shard stream (shards roll and split
// under them), two of them killed and replaced, with AWS's transaction
// conflicts emulated in front of DynamoDB Local for every one of them
// (one Transport: one AWS), each transaction holding its items for 15 ms
// after DynamoDB Local answered. Commits of different shards share no
// item by design (a branch's records are in one shard; a child is read
// after its parent's end), so an interferer stands for the transactions
// that do meet them on AWS — a take-over's stale committer claiming a
// checkpoint, a repair or a heat split's second committer on a report
// item: it holds a random checkpoint or report item in a transaction,
// again and again. Every consumer transaction it meets is cancelled
// (TransactionConflict), every checkpoint move outside a commit refused
// (TransactionConflictException); the consumers retry. Then: reconcile
// finds 0 differences, no child's checkpoint moved before its parent's
// end, 0 commits failed among the lives not killed, and the consumers
// counted exactly the cancellations the emulation made of their
// transactions.
//
// A failed commit is ledger_commits_total{outcome="failed"}: a commit
// whose own attempts were spent (fleetAttempts, each cancelled, throttled
// or unanswered) or refused for good (a permanent error, a refusal a
// retry cannot mend). Not failed, and not asserted: a commit given up
// because its context ended first (outcome="cancelled": the reader's
// lease lost or expired mid-commit, which a loaded machine causes by
// delaying renewals, or the stop's grace over), whose outcome the next
// owner's guard settles; and a killed life's commits, which its death
// fails (its calls refused without reaching DynamoDB Local are
// unanswered attempts until the budget is spent).
func TestPoller_EmulatedFleetUnderAWSConflictsKilledAndRestartedIsExact(t *testing.T) {
	ddbtest.Long(t)
	e := newEmuEnv(t, 241, streamemu.Config{Shards: 4, RollRecords: 60, SplitRatio: 0.4, MaxOpenShards: 8, Seed: 241})
	// A chain: one tenant of 200 branches, each its own partition key,
	// dealt over the shards, in 3 currencies (BRL, JPY, BHD: 2, 0 and 3
	// fraction digits) and 3 time zones with their own business-day
	// cut-offs (issue 24's roll-up proof: ledgertest.Chain).
	chain := ledgertest.NewChain("chain", 200)
	chain.Apply(e.w)
	require.NoError(t, chain.WriteBranches(context.Background(), e.ddb, e.table))
	emu := e.conflicts
	coord := table.CoordinationTableName(e.table)
	intf := &ddbconflict.Interferer{API: conflictClient(t, emu, nil), Tables: []string{e.table, coord},
		EntityTypes: []string{aggregates.EntityReport, aggregates.EntityCheckpoint, aggregates.EntityApplied, table.EntityRollupDelta}, Pause: 10 * time.Millisecond, Seed: 241}
	e.intf = intf
	ictx, stopInterferer := context.WithCancel(context.Background())
	idone := make(chan error, 1)
	go func() { idone <- intf.Run(ictx) }()
	t.Cleanup(stopInterferer)

	var all []*testPoller // every life, for the metrics
	owners := map[*testPoller]string{}
	var survivors []*testPoller // the lives not killed: a killed life's commit in flight fails by the kill
	life := func(owner string) (*testPoller, *atomic.Bool, func()) {
		dead := &atomic.Bool{}
		tp := e.pollerWith(t, owner, deadStreams{Streams: e.s, dead: dead.Load}, conflictClient(t, emu, dead.Load),
			processor.Config{MaxAttempts: fleetAttempts, BaseBackoff: time.Millisecond, MaxBackoff: fleetMaxBackoff},
			// A stop lets the batch in hand commit (a killed life's calls
			// fail at once, so its stop is quick): with 1 s on this loaded
			// machine a survivor's stop abandoned a commit in flight
			// (counted failed), whose goroutine then met the drain's.
			func(c *poller.Config) { c.DiscoverInterval, c.ShutdownTimeout = time.Minute, 20*time.Second })
		all = append(all, tp)
		owners[tp] = owner
		e.lives = append(e.lives, tp)
		return tp, dead, start(t, tp)
	}
	lives := make([]*testPoller, 4)
	deads := make([]*atomic.Bool, 4)
	stops := make([]func(), 4)
	for i := range 4 {
		lives[i], deads[i], stops[i] = life(fmt.Sprintf("p%d", i+1))
	}
	for round := range 4 {
		e.write(t, 250) // about 1,000 changes over the 200 branches
		if round == 1 || round == 2 {
			i := 4 - round // p3, then p2: killed, a new life started
			deads[i].Store(true)
			stops[i]()
			lives[i], deads[i], stops[i] = life(fmt.Sprintf("p%d-life%d", i+1, round+1))
		}
	}
	survivors = append(survivors, lives...)
	// Conflicts need commits: until one has met a held item, write on
	// (a few more steps at a time), the interferer still running.
	met := func() bool {
		return sumCounter(t, all, func(m *processor.Metrics) float64 {
			return counter(t, m.Conflicts.WithLabelValues(processor.ConflictTransactionConflict))
		}) > 0
	}
	for extra := 0; !met(); extra++ {
		select {
		case err := <-idone:
			require.NoError(t, err)
			t.Fatal("the interferer stopped")
		default:
		}
		require.Less(t, extra, 30, "no commit met a held item in 30 more rounds of writes")
		e.write(t, 20)
	}
	require.NoError(t, e.s.Sync(context.Background()))
	for i := range stops {
		stops[i]()
	}
	stopInterferer()
	require.NoError(t, <-idone)
	// The fleet's share of the emulation's cancellations: every life is
	// stopped and the interferer done; the drain's (finish) come after.
	cancelled, rejected := emu.Stats()
	sent, interfererCancelled := intf.Stats()
	e.finish(t, nil)
	// The tenant roll-ups: every delta folded, then reconcile with
	// Rollups finds them equal to the sum of the branch folds.
	proof := e.requireRollupsReconciled(t, chain)

	failed := sumCounter(t, survivors, func(m *processor.Metrics) float64 { return counter(t, m.Commits.WithLabelValues("failed")) })
	cancelledCommits := sumCounter(t, survivors, func(m *processor.Metrics) float64 {
		return counter(t, m.Commits.WithLabelValues(processor.CommitCancelled))
	})
	committed := sumCounter(t, all, func(m *processor.Metrics) float64 { return counter(t, m.Commits.WithLabelValues("committed")) })
	conflicts := sumCounter(t, all, func(m *processor.Metrics) float64 {
		return counter(t, m.Conflicts.WithLabelValues(processor.ConflictTransactionConflict))
	})
	t.Logf("%d poller lives: %d commits, %d transaction conflicts counted, 0 failed wanted (%v); emulation: %d transactions cancelled (%d of them the interferer's, of %d it sent), %d single-item writes refused",
		len(all), int(committed), int(conflicts), failed, cancelled, interfererCancelled, sent, rejected)
	longest := intf.Longest()
	t.Logf("commits cancelled among the lives not killed (their context ended: a lease lost or expired mid-commit, the stop's grace over): %v; the interferer's longest hold %v (the budget: %d attempts at 1 ms–%v)",
		cancelledCommits, longest.Round(time.Millisecond), fleetAttempts, fleetMaxBackoff)
	if !assert.Zero(t, failed, "commits failed among the lives not killed") {
		// Each failed commit's error and its poller's state, so that the
		// run that fails names its cause.
		for _, tp := range survivors {
			explainFailedCommits(t, owners[tp], tp)
		}
	}
	assert.Positive(t, committed)
	assert.Positive(t, conflicts, "conflicts met and counted")
	// Every cancellation of a consumer's transaction was counted once,
	// and nothing else was.
	assert.Equal(t, float64(cancelled-int64(interfererCancelled)), conflicts, "ledger_aggregate_conflicts_total{reason=\"transaction_conflict\"} against the emulation's cancellations")
	// Bounded: only the interferer's transactions that held their item
	// (sent − cancelled) cancel a consumer's, each the attempts of the one
	// commit naming the item during the hold (one shard commits an item at
	// a time), fewer than fleetAttempts of them, or that commit would have
	// failed.
	holds := float64(sent - interfererCancelled)
	assert.LessOrEqual(t, conflicts, (fleetAttempts-1)*holds, "conflicts per interferer hold")
	t.Logf("conflicts per interferer hold: %.2f", conflicts/holds)
	killedFailed := sumCounter(t, all, func(m *processor.Metrics) float64 { return counter(t, m.Commits.WithLabelValues("failed")) }) - failed
	t.Logf("commits failed by a kill: %v; conflicts per commit: %.2f", killedFailed, conflicts/committed)
	folded := sumCounter(t, e.lives, func(m *processor.Metrics) float64 { return recordsTotal(t, m, processor.OutcomeRollup) })
	t.Logf("roll-ups: %d roll-up deltas folded (ledger_records_total{outcome=\"rollup\"}, every life and drain), %s", int(folded), proof)
	assert.Positive(t, folded, "roll-up deltas folded")
}

// A commit whose checkpoint is held for 2 s — another transaction's in
// flight while a loaded DynamoDB Local takes that long to answer it (the
// fleet test's interferer logs its longest hold: 0.6 s at load 9) — spends
// 40 attempts at the tests' usual backoffs (1–20 ms, full jitter: at most
// 0.7 s; each attempt meeting the hold is cancelled at once) and fails,
// and outlasts the hold at the fleet's (1–250 ms: about 4 s, as
// production's 10 attempts at 25 ms–3 s), committing on the first try
// after it. The cause the fleet proof's budget answers, shown on its own:
// exact either way (a failed commit is read again from the checkpoint).
func TestPoller_AHoldAsLongAsALoadedDynamoDBLocalsAnswerSpendsOnlyTheUsualBudget(t *testing.T) {
	for i, tc := range []struct {
		name       string
		maxBackoff time.Duration
		fails      bool
	}{
		{"usual backoffs, 1–20 ms", 20 * time.Millisecond, true},
		{"the fleet's backoffs, 1–250 ms", fleetMaxBackoff, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, uint64(260+i))
			f := e.stream
			f.addShard("shardId-A", "")
			f.appendTo("shardId-A", e.write(t, 60)...)
			e.drain(t, "p0", nil) // the checkpoint exists
			f.appendTo("shardId-A", e.write(t, 60)...)

			emu := newConflicts(0)
			var armed atomic.Bool
			held := make(chan struct{})
			emu.Hold = func(hctx context.Context, _ []string) {
				if armed.CompareAndSwap(true, false) {
					close(held)
					select {
					case <-time.After(2 * time.Second):
					case <-hctx.Done():
					}
				}
			}
			other := conflictClient(t, emu, nil)
			items := ddbconflict.AlwaysHolds(table.CoordinationTableName(e.table), table.Key(aggregates.CheckpointKey(e.stream.arn, "shardId-A")))
			armed.Store(true)
			odone := make(chan error, 1)
			go func() {
				_, err := other.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
				odone <- err
			}()
			<-held

			p1 := e.pollerWith(t, "p1", nil, conflictClient(t, emu, nil),
				processor.Config{MaxAttempts: fleetAttempts, BaseBackoff: time.Millisecond, MaxBackoff: tc.maxBackoff},
				func(c *poller.Config) { c.Drain = true })
			rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			require.NoError(t, p1.Run(rctx))
			require.NoError(t, <-odone, "the other transaction commits")
			e.requireReconciled(t)
			failed := counter(t, p1.pm.Commits.WithLabelValues("failed"))
			conflicts := counter(t, p1.pm.Conflicts.WithLabelValues(processor.ConflictTransactionConflict))
			t.Logf("%v commits failed, %v transaction conflicts counted", failed, conflicts)
			if tc.fails {
				assert.Positive(t, failed, "the budget spent within the hold")
			} else {
				assert.Zero(t, failed, "commits failed")
				assert.Positive(t, conflicts, "the hold met")
			}
		})
	}
}

// explainFailedCommits logs what a poller's failed commits were: the
// error of each (a failed commit's error reaches its reader, which logs
// it at warning level as a failed "process" and backs off), the reader
// ends with an error, the lease losses and pauses (a commit whose lease
// was lost mid-call counts as cancelled, not failed), and the poller's
// commit and lease figures.
func explainFailedCommits(t *testing.T, owner string, tp *testPoller) {
	t.Helper()
	c := func(v *prometheus.CounterVec, l string) float64 { return counter(t, v.WithLabelValues(l)) }
	t.Logf("%s: commits committed %v, duplicate %v, failed %v, cancelled %v; leases expired %v, lost %v, paused %v, handed off %v; reader restarts: lease %v, error %v",
		owner, c(tp.pm.Commits, "committed"), c(tp.pm.Commits, "duplicate"), c(tp.pm.Commits, "failed"), c(tp.pm.Commits, processor.CommitCancelled),
		c(tp.m.LeaseEvents, poller.LeaseExpired), c(tp.m.LeaseEvents, poller.LeaseLost), c(tp.m.LeaseEvents, poller.LeasePaused), c(tp.m.LeaseEvents, poller.LeaseHandedOff),
		c(tp.m.ReaderRestarts, poller.RestartLease), c(tp.m.ReaderRestarts, poller.RestartError))
	for _, l := range tp.logs.lines() {
		// Warnings and errors: a failed "process" (the commit's error),
		// lease losses, renewals and heartbeats late, the shutdown's
		// timeout; and every reader that ended with an error.
		msg, _ := l["msg"].(string)
		if l["level"] == "ERROR" || l["level"] == "WARN" || msg == "shard reader stopped" && l["error"] != "" && l["error"] != nil {
			t.Logf("%s: %v", owner, l)
		}
	}
}

// A commit that finds one of its items held by another transaction is
// cancelled (TransactionConflict), counted, retried with backoff and
// committed once the item is free: exact, no failed commit. The hold is
// released by the third cancellation the consumer receives, so exactly
// three are counted, whatever the machine's speed. Held are the shard's
// checkpoint in the coordination table (a take-over's stale committer)
// or every report item of the ledger table the first poller created (a
// repair or a second committer).
func TestPoller_CommitMeetingAHeldItemIsRetriedCountedAndExact(t *testing.T) {
	tests := []struct {
		name         string
		hold         func(e *env) []map[string]ddbtypes.AttributeValue // keys, in tableOf's table
		coordination bool
	}{
		{"checkpoint held", func(e *env) []map[string]ddbtypes.AttributeValue {
			return []map[string]ddbtypes.AttributeValue{table.Key(aggregates.CheckpointKey(e.stream.arn, "shardId-A"))}
		}, true},
		{"report items held", func(e *env) []map[string]ddbtypes.AttributeValue {
			out, err := e.ddb.Scan(context.Background(), &dynamodb.ScanInput{TableName: &e.table, ConsistentRead: aws.Bool(true),
				FilterExpression: aws.String("entityType = :r"), ProjectionExpression: aws.String("PK, SK"),
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":r": table.S(aggregates.EntityReport)}})
			require.NoError(t, err)
			require.NotEmpty(t, out.Items)
			return out.Items[:min(len(out.Items), 100)]
		}, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, uint64(250+i))
			f := e.stream
			f.addShard("shardId-A", "")
			f.appendTo("shardId-A", e.write(t, 60)...)
			e.drain(t, "p0", nil) // the checkpoint and the report items exist
			f.appendTo("shardId-A", e.write(t, 60)...)

			keys := tc.hold(e)
			tbl := e.table
			if tc.coordination {
				tbl = table.CoordinationTableName(e.table)
			}
			// The consumer's transport: the third cancellation it receives
			// frees the held items before the answer reaches it.
			hold := ddbconflict.NewHolder("TransactWriteItems", 3)
			emu := newConflicts(0)
			hold.Install(emu)
			counting := hold.Counting(emu)
			cfg := ddbtest.Config(t, infra.WithTransportWrapper(func(http.RoundTripper) http.RoundTripper { return counting }))
			consumer := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })

			// The other transaction: ConditionChecks that always hold,
			// kept in flight.
			items := ddbconflict.AlwaysHolds(tbl, keys...)
			other := conflictClient(t, emu, nil)
			odone := make(chan error, 1)
			hold.Arm()
			go func() {
				_, err := other.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
				odone <- err
			}()
			<-hold.Held()

			p1 := e.pollerWith(t, "p1", nil, consumer, processor.Config{}, func(c *poller.Config) { c.Drain = true })
			rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			require.NoError(t, p1.Run(rctx))
			require.NoError(t, <-odone, "the other transaction commits")

			e.requireReconciled(t)
			cancelled, _ := emu.Stats()
			assert.Equal(t, int64(3), cancelled, "the emulation cancelled the consumer's commit three times")
			assert.Equal(t, 3.0, counter(t, p1.pm.Conflicts.WithLabelValues(processor.ConflictTransactionConflict)), "ledger_aggregate_conflicts_total{reason=\"transaction_conflict\"}")
			assert.Equal(t, 3.0, counter(t, p1.pm.Retries.WithLabelValues("TransactWriteItems", "server")), "each conflict retried")
			assert.Zero(t, counter(t, p1.pm.Commits.WithLabelValues("failed")), "commits failed")
			assert.Positive(t, recordsTotal(t, p1.pm, processor.OutcomeApplied))
		})
	}
}
