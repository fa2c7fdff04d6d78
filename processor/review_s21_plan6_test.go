package processor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Review (adversarial, session 21) of plan layout 6 as built
// (docs/exactly-once.md, "Review (adversarial, session 21): plan layout 6
// as built").

// crashMidBatch6With is crashMidBatch6 with the dying consumer's Config
// (its limits are set here): the shard's first run and three groups land
// (the third with its answer lost), then every write is dropped. It
// returns the records and the pending plan string.
func crashMidBatch6With(t *testing.T, e *env, cfg processor.Config) ([]processor.Record, string) {
	t.Helper()
	_, recs := e.records(t)
	var writes atomic.Int64
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op != "TransactWriteItems" {
			return ledgertest.Pass
		}
		switch n := writes.Add(1); {
		case n < 4:
			return ledgertest.Pass
		case n == 4:
			return ledgertest.LoseAnswer
		}
		return ledgertest.Drop
	}
	defer func() { e.faults.Decide = nil }()
	cfg.Table, cfg.BaseBackoff, cfg.MaxBackoff = e.table, time.Millisecond, 2*time.Millisecond
	cfg.MaxItemsPerRun, cfg.MaxEntriesPerItem, cfg.MaxAttempts = 12, 2, 2
	p, err := processor.New(e.faulty, cfg, nil)
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shardOf(t, e))
	g.CommitBatches()
	_, err = p.Process(context.Background(), g, recs)
	require.Error(t, err, "the first consumer dies mid-batch")
	require.True(t, g.Pending(), "a half-committed batch is left")
	return recs, pendingPlan(t, e)
}

// pendingPlan returns the plan string of the shard's pending batch.
func pendingPlan(t *testing.T, e *env) string {
	t.Helper()
	coord := table.CoordinationTableName(e.table)
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &coord,
		Key: table.Key(aggregates.CheckpointKey(e.streamARN, shardOf(t, e))), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	cp, err := table.DecodeCheckpoint(shardOf(t, e), out.Item)
	require.NoError(t, err)
	require.NotNil(t, cp.Pending)
	return cp.Pending.Plan
}

// stagingReadHook calls hook once, at the first consistent read of a
// staging item, before (or after) the read is made.
type stagingReadHook struct {
	processor.DynamoDB
	after bool
	once  sync.Once
	hook  func()
	fired bool
}

func (s *stagingReadHook) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	pk, _ := table.String(in.Key, table.AttrPK)
	staging := strings.HasPrefix(pk, table.StagingPrefix)
	if staging && !s.after {
		s.once.Do(func() { s.fired = true; s.hook() })
	}
	out, err := s.DynamoDB.GetItem(ctx, in, opts...)
	if staging && s.after {
		s.once.Do(func() { s.fired = true; s.hook() })
	}
	return out, err
}

// Two committers of one shard meet at a delta group (a lease moved while
// the old holder was mid-batch): the stale one has seen pendingNext = k_d
// and is about to read the staging item (before) or has read it (after)
// when the other finishes the whole batch. The stale one must take the
// group as landed — no staging_gone, no second delta, no second count —
// and the figures, branches included, stay exact (S19-P6-2 as built).
func TestReviewS21_TwoCommittersMeetAtADeltaGroup(t *testing.T) {
	for _, after := range []bool{false, true} {
		name := map[bool]string{false: "before_the_staging_read", true: "after_the_staging_read"}[after]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			batch6Txs(t, e, 120)
			recs, plan := crashMidBatch6With(t, e, processor.Config{})
			require.Equal(t, "12/2/6/32", plan)
			require.NotEmpty(t, coordItems(t, e, table.StagingPrefix))

			other := newConsumer(t, e, "batch", nil, processor.Config{})
			api := &stagingReadHook{DynamoDB: e.ddb, after: after}
			api.hook = func() { other.deliver(recs...) }
			reg := prometheus.NewRegistry()
			p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}, processor.NewMetrics(reg))
			require.NoError(t, err)
			g := p.ShardGuard(e.streamARN, shardOf(t, e))
			g.CommitBatches()
			_, err = p.Process(context.Background(), g, recs)
			require.NoError(t, err)
			require.True(t, api.fired, "the stale committer reached a delta group")
			assert.False(t, g.Pending())
			assert.Zero(t, testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues(processor.ConflictStagingGone)), "the item was deleted by the other committer's landing, not lost")
			assert.Positive(t, testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues(processor.ConflictDuplicate)), "the group is taken as landed")
			requireRollupsExact(t, e, true)
			requireEveryRecordCounted(t, e)
			other.drain()
			requireRollupsExact(t, e, true)
			e.requireReconciled(t)
		})
	}
}

// A batch planned with roll-ups on (12/2/6/32) is left pending and is
// finished by a consumer with roll-ups off: the stored plan rules — the
// staged transitions are read back, the deltas put, every record counted
// once — and roll-ups stay exact.
func TestReviewS21_RollupsTurnedOffBetweenCrashAndResume(t *testing.T) {
	e := newEnv(t)
	batch6Txs(t, e, 120)
	recs, plan := crashMidBatch6With(t, e, processor.Config{})
	require.Equal(t, "12/2/6/32", plan)
	c := newConsumer(t, e, "batch", nil, processor.Config{NoRollups: true})
	c.deliver(recs...)
	requireRollupsExact(t, e, true)
	requireEveryRecordCounted(t, e)
	newConsumer(t, e, "batch", nil, processor.Config{}).drain()
	requireRollupsExact(t, e, true)
	e.requireReconciled(t)
}

// unstageRefusedOnce answers the first transaction that deletes a staging
// item with a cancellation whose staging delete's condition failed,
// without sending it: the item is unchanged (DynamoDB Local fails a
// condition so on an item a concurrent transaction it then rolled back
// had written: commitTx's recheck, review of session 18).
type unstageRefusedOnce struct {
	processor.DynamoDB
	refused atomic.Bool
}

func (u *unstageRefusedOnce) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	reasons := make([]ddbtypes.CancellationReason, len(in.TransactItems))
	hit := false
	for i, it := range in.TransactItems {
		reasons[i].Code = aws.String("None")
		if it.Delete != nil {
			if pk, _ := table.String(it.Delete.Key, table.AttrPK); strings.HasPrefix(pk, table.StagingPrefix) {
				reasons[i].Code, hit = aws.String("ConditionalCheckFailed"), true
			}
		}
	}
	if hit && u.refused.CompareAndSwap(false, true) {
		return nil, &ddbtypes.TransactionCanceledException{Message: aws.String("Transaction cancelled (review s21)"), CancellationReasons: reasons}
	}
	return u.DynamoDB.TransactWriteItems(ctx, in, opts...)
}

// A staging delete refused once on an item that is still there at klast
// (nothing changed it) is no staging_gone: the group reads the item
// again, finds it final, and puts its delta with the staged transitions
// and its delete. Before the fix the one refusal dropped the delete and
// the staged values for good: branches short, the item left behind, and
// staging_gone counted for an item that was never gone.
func TestReviewS21_AStagingDeleteRefusedOnceOnAnUnchangedItemIsNotStagingGone(t *testing.T) {
	e := newEnv(t)
	batch6Txs(t, e, 120)
	_, recs := e.records(t)
	api := &unstageRefusedOnce{DynamoDB: e.ddb}
	reg := prometheus.NewRegistry()
	p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		MaxItemsPerRun: 12, MaxEntriesPerItem: 2}, processor.NewMetrics(reg))
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shardOf(t, e))
	g.CommitBatches()
	_, err = p.Process(context.Background(), g, recs)
	require.NoError(t, err)
	require.True(t, api.refused.Load(), "a staging delete was refused once")
	assert.False(t, g.Pending())
	assert.Zero(t, testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues(processor.ConflictStagingGone)), "the item was there all along")
	requireRollupsExact(t, e, true)
	requireEveryRecordCounted(t, e)
}

// A contributor parked in a middle group of a several-group batch (its
// branch report damaged before the batch: its update is refused): the
// group stages 0 for it, the batch finishes, the parked item carries no
// roll-up share (the figures are in the batch delta), the roll-ups' figures
// are the sum of the transactions, every record is counted once and no
// staging item or open mark is left. (branches is not compared: the
// parked part's crossing of zero is carried by no rule, "Parking".)
func TestReviewS21_AContributorParkedInAMiddleGroup(t *testing.T) {
	e := newEnv(t)
	batch6Txs(t, e, 120)
	k := aggregates.ReportKey{Tenant: "acme", Branch: "b2", Period: aggregates.Period{Type: aggregates.Daily, Value: "2026-11-04"}}.Key()
	_, err := e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]ddbtypes.AttributeValue{
		"PK": sAV(k.PK), "SK": sAV(k.SK), "entityType": sAV(aggregates.EntityReport), table.AttrTotalIncome: sAV("oops"),
	}})
	require.NoError(t, err)
	_, recs := e.records(t)
	api := &recordingAPI{DynamoDB: e.ddb}
	p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		MaxItemsPerRun: 12, MaxEntriesPerItem: 2}, nil)
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shardOf(t, e))
	g.CommitBatches()
	res, err := p.Process(context.Background(), g, recs)
	require.NoError(t, err)
	assert.Greater(t, res.Runs, 3)
	assert.False(t, g.Pending())
	assert.Positive(t, api.w.stagingPuts)
	st := requireRollupsExact(t, e, false)
	assert.Zero(t, st.parked, "the parked item carries no roll-up share")
	var parked int
	for _, item := range scanAll(t, e) {
		if ref, err := aggregates.ParseReportItemKey(table.KeyOf(item)); err == nil && ref.Kind == aggregates.ReportParked {
			parked++
		}
	}
	assert.Equal(t, 1, parked, "the damaged report's part is parked")
	requireEveryRecordCounted(t, e)
}

// claimRace runs race once, right before the first TransactWriteItems
// goes through.
type claimRace struct {
	processor.DynamoDB
	once sync.Once
	race func()
}

func (c *claimRace) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.once.Do(c.race)
	return c.DynamoDB.TransactWriteItems(ctx, in, opts...)
}

// S21-P6-2: a consumer with roll-ups off plans a batch holding roll-up
// delta records fresh (…/6/0) and loses group 0's claim to a consumer
// with roll-ups on (…/6/32), which dies after it. Going on from the
// stored plan, it must fold the batch's roll-up records as that plan
// did: before the fix its own plan had cleared them from the changes it
// holds, the digest differed, and the call failed ("changed code
// mid-batch?").
func TestReviewS21_ARollupsOffConsumerLosingGroup0ToARollupsOnOneFinishesItsPlan(t *testing.T) {
	e := newEnv(t)
	batch6Txs(t, e, 30)
	newConsumer(t, e, "batch", nil, processor.Config{}).pass() // puts roll-up delta items: their INSERTs follow
	for i := range 40 {
		rtx{"acme", fmt.Sprint("b", i%3*2), "BRL", fmt.Sprintf("2026-11-%02d", 1+i%5), fmt.Sprint("x", i), "INCOME", "2", fmt.Sprint("cx", i%4)}.put(t, e, "")
	}
	_, recs := e.records(t)
	var died bool
	race := func() {
		// The roll-ups-on consumer lands group 0 of its 12/2/6/32 plan,
		// then every write of it is dropped.
		var writes atomic.Int64
		e.faults.Decide = func(op string) ledgertest.Fault {
			if op == "TransactWriteItems" && writes.Add(1) > 1 {
				return ledgertest.Drop
			}
			return ledgertest.Pass
		}
		defer func() { e.faults.Decide = nil }()
		p, err := processor.New(e.faulty, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
			MaxItemsPerRun: 12, MaxEntriesPerItem: 2, MaxAttempts: 2}, nil)
		require.NoError(t, err)
		g := p.ShardGuard(e.streamARN, shardOf(t, e))
		g.CommitBatches()
		_, err = p.Process(context.Background(), g, recs)
		died = err != nil && g.Pending()
	}
	api := &claimRace{DynamoDB: e.ddb, race: race}
	p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		MaxItemsPerRun: 12, MaxEntriesPerItem: 2, NoRollups: true}, nil)
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shardOf(t, e))
	g.CommitBatches()
	_, err = p.Process(context.Background(), g, recs)
	require.True(t, died, "the roll-ups-on consumer left its batch pending")
	require.NoError(t, err, "the stored plan is finished from the records as classified")
	assert.False(t, g.Pending())
	requireEveryRecordCounted(t, e)
	newConsumer(t, e, "batch", nil, processor.Config{}).drain()
	requireRollupsExact(t, e, true)
	e.requireReconciled(t)
}

// deltaGroupRace lets another committer finish the batch right before this
// one's first delta group is sent, and answers that transaction as a
// committer meeting the other's transaction in flight could be answered:
// the claim TransactionConflict, the delta put ConditionalCheckFailed (the
// other's delta is there), the rest None; unsent.
type deltaGroupRace struct {
	processor.DynamoDB
	once  sync.Once
	other func()
	fired bool
}

func (d *deltaGroupRace) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	reasons := make([]ddbtypes.CancellationReason, len(in.TransactItems))
	delta := false
	for i, it := range in.TransactItems {
		reasons[i].Code = aws.String("None")
		if it.Put != nil {
			if pk, _ := table.String(it.Put.Item, table.AttrPK); aggregates.IsRollupLaneKey(pk) {
				reasons[i].Code, delta = aws.String("ConditionalCheckFailed"), true
			}
		}
	}
	reasons[0].Code = aws.String("TransactionConflict")
	var answer bool
	if delta {
		d.once.Do(func() { d.fired, answer = true, true; d.other() })
	}
	if answer {
		return nil, &ddbtypes.TransactionCanceledException{Message: aws.String("Transaction cancelled (review s21)"), CancellationReasons: reasons}
	}
	return d.DynamoDB.TransactWriteItems(ctx, in, opts...)
}

// S21-P6-3: a delta put refused ConditionalCheckFailed while the claim met
// a transaction in flight is the other committer's landing, not a
// duplicate key: the group is sent again (its claim then fails: landed),
// never a failed call.
func TestReviewS21_ADeltaPutRefusedBesideAClaimConflictIsRetried(t *testing.T) {
	e := newEnv(t)
	batch6Txs(t, e, 120)
	recs, _ := crashMidBatch6With(t, e, processor.Config{})
	other := newConsumer(t, e, "batch", nil, processor.Config{})
	api := &deltaGroupRace{DynamoDB: e.ddb, other: func() { other.deliver(recs...) }}
	p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}, nil)
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shardOf(t, e))
	g.CommitBatches()
	_, err = p.Process(context.Background(), g, recs)
	require.True(t, api.fired, "the race was run at a delta group")
	require.NoError(t, err, "the group is taken as landed, not refused")
	assert.False(t, g.Pending())
	requireRollupsExact(t, e, true)
	requireEveryRecordCounted(t, e)
}
