package processor_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Review of session 26: the protocol raised before the first write
// (docs/exactly-once.md, "Review (adversarial, session 26): the protocol
// raised before the first write").

// flagsProtocol reads the env's flags item's protocol (0: absent).
func flagsProtocol(t *testing.T, e *env) int64 {
	t.Helper()
	f, err := table.GetFlags(context.Background(), e.ddb, e.table)
	require.NoError(t, err)
	require.False(t, f.ProtocolDamaged)
	return f.Protocol
}

// fencedCheckpoint says whether the env's checkpoint of shard is fenced by
// this version.
func fencedCheckpoint(t *testing.T, e *env, shard string) bool {
	t.Helper()
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table.CoordinationTableName(e.table)), Key: table.Key(aggregates.CheckpointKey(e.streamARN, shard)), ConsistentRead: aws.Bool(true),
	})
	require.NoError(t, err)
	require.NotNil(t, out.Item, "a checkpoint")
	cp, err := table.DecodeCheckpoint(shard, out.Item)
	require.NoError(t, err)
	return cp.Fence == table.Protocol
}

// TestReviewS26P1_AFlagsItemCreatedAfterARaiseIsRaisedBeforeTheNextWrite:
// a consumer whose raise found no flags item (a table of the template,
// before `ledgerctl flags set` creates it) raises again before its writes
// once the raise's interval has passed, so the flags item created
// meanwhile, without a protocol, says 4 before the fences after it
// (S26-P1: the raise was done for good, and the commits fenced under no
// protocol for the life of the consumer).
func TestReviewS26P1_AFlagsItemCreatedAfterARaiseIsRaisedBeforeTheNextWrite(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(2601).Run(ctx, e.ddb, e.table, 10))
	shard, recs := e.records(t)
	_, err := e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.table), Key: table.Key(aggregates.FlagsKey())})
	require.NoError(t, err)

	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	p, err := processor.New(e.ddb, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Now: func() time.Time { return time.Unix(0, clock.Load()) }}, processor.NewMetrics(nil))
	require.NoError(t, err)
	raised, err := p.RaiseProtocol(ctx) // a poller's start (poller.NewService)
	require.NoError(t, err)
	assert.False(t, raised, "no flags item: left without one")

	_, err = table.SetFlags(ctx, e.ddb, e.table, map[string]bool{table.FlagWritesEnabled: true}, 0, time.Now())
	require.NoError(t, err)
	require.Equal(t, int64(0), flagsProtocol(t, e), "a flags item created without a protocol")
	clock.Add(int64(2 * time.Minute))

	res, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs)
	require.NoError(t, err)
	require.Positive(t, res.Committed)
	require.True(t, fencedCheckpoint(t, e, shard))
	assert.Equal(t, int64(table.Protocol), flagsProtocol(t, e), "the fence's protocol in the flags before it")
}

// TestReviewS26P2_AProcessorLivingPastAnUnfenceRaisesAgainBeforeItFences:
// a consumer that lives on past `ledgerctl unfence` (a warm Lambda
// instance whose mapping is enabled again on this version, a poller left
// running) says protocol 4 again before it fences more, once its raise is
// older than protocol's interval (S26-P2: raised once per Processor, it
// fenced under protocol 3 for as long as it lived, and an older
// ledgerctl's --repair was not refused).
func TestReviewS26P2_AProcessorLivingPastAnUnfenceRaisesAgainBeforeItFences(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(2602).Run(ctx, e.ddb, e.table, 20))
	shard, recs := e.records(t)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	p, err := processor.New(e.ddb, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Now: func() time.Time { return time.Unix(0, clock.Load()) }}, processor.NewMetrics(nil))
	require.NoError(t, err)

	_, err = p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs[:10])
	require.NoError(t, err)
	require.Equal(t, int64(table.Protocol), flagsProtocol(t, e))

	// ledgerctl unfence: the checkpoint back to the old layout, then the
	// protocol from 4 to 3 (cmd/ledgerctl/unfence.go's writes).
	cp, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table.CoordinationTableName(e.table)), Key: table.Key(aggregates.CheckpointKey(e.streamARN, shard)), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	pos, _ := table.String(cp.Item, table.AttrPos)
	_, err = e.ddb.UpdateItem(ctx, table.UnfenceCheckpoint(table.CoordinationTableName(e.table), aggregates.CheckpointKey(e.streamARN, shard), pos))
	require.NoError(t, err)
	require.False(t, fencedCheckpoint(t, e, shard))
	lowered, err := table.LowerProtocol(ctx, e.ddb, e.table, table.Protocol, table.Protocol-1)
	require.NoError(t, err)
	require.True(t, lowered)

	clock.Add(int64(2 * time.Minute)) // the mapping enabled again later
	_, err = p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs[10:])
	require.NoError(t, err)
	require.True(t, fencedCheckpoint(t, e, shard), "the checkpoint fenced again")
	assert.Equal(t, int64(table.Protocol), flagsProtocol(t, e), "the fence's protocol in the flags again")
	e.requireReconciled(t)
}

// flagsFaults is the table's API with faults on the raise of the
// protocol: the first throttled of its UpdateItems fail throttled; while
// hold is set, each raise waits for it to close.
type flagsFaults struct {
	processor.DynamoDB
	throttled atomic.Int32
	hold      chan struct{}
	entered   chan struct{}
}

func (f *flagsFaults) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if table.KeyOf(in.Key) == aggregates.FlagsKey() {
		if f.hold != nil {
			f.entered <- struct{}{}
			<-f.hold
		}
		if f.throttled.Add(-1) >= 0 {
			return nil, &ddbtypes.ProvisionedThroughputExceededException{Message: aws.String("test: the flags item's partition throttled")}
		}
	}
	return f.DynamoDB.UpdateItem(ctx, in, opts...)
}

// TestReviewS26P3_ARaiseThrottledIsRetriedAsItsOwnUpdateItem: a throttle
// of the raise before a commit is the raise's, retried and counted as an
// UpdateItem (its write counted in the write metrics too), not as a retry
// of the commit's transaction of unknown outcome (S26-P3: counted as
// TransactWriteItems throttles and retries, its write not counted).
func TestReviewS26P3_ARaiseThrottledIsRetriedAsItsOwnUpdateItem(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(2603).Run(ctx, e.ddb, e.table, 10))
	shard, recs := e.records(t)
	api := &flagsFaults{DynamoDB: e.ddb}
	api.throttled.Store(2)
	p := e.processor(t, nil, api)
	m := p.Metrics()

	res, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs)
	require.NoError(t, err)
	require.Positive(t, res.Committed)
	assert.Equal(t, int64(table.Protocol), flagsProtocol(t, e))
	assert.Equal(t, 2.0, testutil.ToFloat64(m.Throttles.WithLabelValues("UpdateItem")), "the raise's throttles")
	assert.Equal(t, 0.0, testutil.ToFloat64(m.Throttles.WithLabelValues("TransactWriteItems")), "no commit throttled")
	assert.Equal(t, 0.0, testutil.ToFloat64(m.Retries.WithLabelValues("TransactWriteItems", "throttle")), "no commit retried")
	assert.Equal(t, 0.0, testutil.ToFloat64(m.Commits.WithLabelValues("failed")))
	assert.GreaterOrEqual(t, testutil.ToFloat64(m.WriteRequests.WithLabelValues("UpdateItem")), 3.0, "the raise's three attempts")
	assert.Positive(t, testutil.ToFloat64(m.WriteUnits.WithLabelValues("UpdateItem")), "the raise's units")
}

// TestReviewS26P4_AWriteWaitingOnAnotherRaiseLeavesWhenItsContextEnds: a
// write waiting for the raise another goroutine of the same Processor is
// sending (a poller's shards at its first commits) returns when its own
// context ends (a lease lost, a shutdown), not when the other raise
// answers (S26-P4: a mutex held during the call).
func TestReviewS26P4_AWriteWaitingOnAnotherRaiseLeavesWhenItsContextEnds(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	api := &flagsFaults{DynamoDB: e.ddb, hold: make(chan struct{}), entered: make(chan struct{}, 1)}
	p := e.processor(t, nil, api)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := p.RaiseProtocol(ctx)
		assert.NoError(t, err)
	}()
	<-api.entered // the first raise is in its call

	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := p.RaiseProtocol(wctx); done <- err }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(5 * time.Second):
		t.Error("the waiter did not leave when its context ended")
	}
	close(api.hold)
	wg.Wait()
	assert.Equal(t, int64(table.Protocol), flagsProtocol(t, e))
}
