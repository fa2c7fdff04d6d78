package processor_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// The guard-alone abandon transaction (docs/exactly-once.md, "Plan layout
// 6", the failure table's trim rows; L-a): lostAt on the checkpoint and
// one move of the coordination table's loss count per abandonment.

// cpItemOf reads the shard's checkpoint item, consistently.
func cpItemOf(t *testing.T, e *env, shard string) table.Checkpoint {
	t.Helper()
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table.CoordinationTableName(e.table)),
		Key: table.Key(aggregates.CheckpointKey(e.streamARN, shard)), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	cp, err := table.DecodeCheckpoint(shard, out.Item)
	require.NoError(t, err)
	return cp
}

func lossesOf(t *testing.T, e *env) int64 {
	t.Helper()
	n, err := table.GetLosses(context.Background(), e.ddb, table.CoordinationTableName(e.table))
	require.NoError(t, err)
	return n
}

// trimShard is a fresh env holding workload seed's n transactions, and
// its shard's records (more than least).
func trimShard(t *testing.T, seed uint64, n, least int) (*env, string, []processor.Record) {
	t.Helper()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(seed).Run(context.Background(), e.ddb, e.table, n))
	shard, recs := e.records(t)
	require.Greater(t, len(recs), least)
	return e, shard, recs
}

// trimmedGuard is a batching guard of shard on p that met a trim after
// the sequence number after (ShardGuard.Trimmed).
func trimmedGuard(p *processor.Processor, e *env, shard, after string) *processor.ShardGuard {
	g := p.ShardGuard(e.streamARN, shard)
	g.CommitBatches()
	g.Trimmed(after)
	return g
}

// fastProcessor is a processor on api whose backoffs are a millisecond.
func fastProcessor(t *testing.T, e *env, api processor.DynamoDB) *processor.Processor {
	t.Helper()
	p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
	require.NoError(t, err)
	return p
}

// txRecorder records the checkpoint actions of every transaction sent.
type txRecorder struct {
	processor.DynamoDB
	mu    sync.Mutex
	conds []string // the condition of each transaction's checkpoint action
}

func (r *txRecorder) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	r.mu.Lock()
	for _, it := range in.TransactItems {
		if u := it.Update; u != nil && strings.HasPrefix(table.KeyOf(u.Key).SK, strings.TrimSuffix(aggregates.CheckpointKey("x", "y").SK, "y")) {
			r.conds = append(r.conds, aws.ToString(u.ConditionExpression))
		}
	}
	r.mu.Unlock()
	return r.DynamoDB.TransactWriteItems(ctx, in, opts...)
}

// An abandoned pending layout-6 batch: one transaction of the guard alone
// moves the checkpoint to the batch's last record with lostAt and moves
// losses once; the next batch is planned as replacing nothing (its first
// group requires no pending state) and commits the records after the
// batch exactly. Fails without the abandon transaction: no lostAt, losses
// 0, and the next batch's first group replaces the stale state.
func TestAbandon_PendingLayout6BatchSetsLostAtMovesLossesOnceAndTheNextBatchReplacesNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
	day := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 80 {
		d := day.AddDate(0, 0, i).Format("2006-01-02")
		_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]ddbtypes.AttributeValue{
			"PK": s("TENANT#t#BRANCH#b#TRANSACTION"), "SK": s(d + "#" + strconv.Itoa(i)),
			"entityType": s("TRANSACTION"), "type": s("INCOME"), "amount": &ddbtypes.AttributeValueMemberN{Value: "1"},
			"category": s("food"), "createdAt": s(d + "T10:00:00Z")}})
		require.NoError(t, err)
	}
	shard, recs := e.records(t)
	start := halfCommitted(t, e, recs, shard, 60)
	before := cpItemOf(t, e, shard)
	require.NotNil(t, before.Pending)
	require.Contains(t, before.Pending.Plan, "/6/", "the pending batch is a layout-6 one")
	require.Empty(t, before.LostAt)
	require.Zero(t, lossesOf(t, e))

	rec := &txRecorder{DynamoDB: e.ddb}
	p, err := processor.New(rec, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
	require.NoError(t, err)
	g := trimmedGuard(p, e, shard, recs[start-1].SequenceNumber) // met opening after the checkpoint
	res, err := p.Process(ctx, g, recs[start+3:])
	require.NoError(t, err)
	assert.Equal(t, len(recs)-start-3, res.Committed)

	cp := cpItemOf(t, e, shard)
	assert.Equal(t, recs[len(recs)-1].SequenceNumber, cp.Seq)
	assert.Nil(t, cp.Pending)
	assert.NotEmpty(t, cp.LostAt, "the checkpoint says records were lost")
	assert.Equal(t, int64(1), lossesOf(t, e), "one abandonment, one move of the loss count")
	require.GreaterOrEqual(t, len(rec.conds), 2)
	assert.Contains(t, rec.conds[0], "#pt = :to", "the first transaction is the abandon, on condition of the stale batch")
	for i, c := range rec.conds[1:] {
		assert.NotContains(t, c, ":apt", "transaction %d replaces a pending batch", i+1)
	}
	assert.Contains(t, rec.conds[1], "attribute_not_exists(#pt)", "the next batch's first claim requires no pending batch")

	// Again: nothing moves the count a second time.
	_, err = p.Process(ctx, g, recs[start+3:])
	require.NoError(t, err)
	assert.Equal(t, int64(1), lossesOf(t, e))

	diffs, _, err := reconcileBranch(ctx, e, "t", "b")
	require.NoError(t, err)
	require.NotEmpty(t, diffs, "the abandoned batch's records are lost until a repair")
	for _, d := range diffs {
		stored := int64(0)
		if d.Stored != nil {
			stored = d.Stored.Count
		}
		assert.LessOrEqual(t, stored, d.Expected.Count, "applied twice: %s", d)
		if d.Report.Period.String() >= "DAILY#"+day.AddDate(0, 0, 60).Format("2006-01-02") && d.Report.Period.String() < "M" {
			t.Errorf("a record after the abandoned batch is wrong: %s", d)
		}
	}
}

// The abandon transaction's answer lost (the write landed): its retry fails
// the condition, the consistent re-read recognises it, losses moves once
// and the consumer goes on. Fails if the retry is not recognised (the
// consumer fails) or moves the count again.
func TestAbandon_LostAnswerMovesLossesOnceAndTheConsumerGoesOn(t *testing.T) {
	ctx := context.Background()
	e, shard, recs := trimShard(t, 24, 150, 0)
	start := halfCommitted(t, e, recs, shard, 60)

	p, err := processor.New(e.faulty, processor.Config{Table: e.table, MaxItemsPerRun: 3,
		BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
	require.NoError(t, err)
	lost := 0
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op == "TransactWriteItems" && lost == 0 {
			lost++
			return ledgertest.LoseAnswer
		}
		return ledgertest.Pass
	}
	defer func() { e.faults.Decide = nil }()
	g := trimmedGuard(p, e, shard, recs[start-1].SequenceNumber)
	_, err = p.Process(ctx, g, recs[80:])
	require.NoError(t, err)
	require.Equal(t, 1, lost)
	cp := cpItemOf(t, e, shard)
	assert.Equal(t, recs[len(recs)-1].SequenceNumber, cp.Seq)
	assert.Nil(t, cp.Pending)
	assert.NotEmpty(t, cp.LostAt)
	assert.Equal(t, int64(1), lossesOf(t, e))
}

// A reader reopened at TRIM_HORIZON with no pending batch (records after
// the checkpoint trimmed): lostAt is set and losses moves once, the
// checkpoint stays until the first batch after the gap commits; the same
// with the abandon's answer lost (recognised by the re-read before any
// retry). Then the transaction itself sent twice, as a write landing after
// that re-read would be: the second fails its condition (lostAt <> :now)
// and the count moves once. Fails without the abandon transaction (no
// lostAt, losses 0) and, for the last step, without both the lostAt term
// and (session 23) the lostAfter term of its condition (losses 3).
func TestAbandon_ReopenAtTrimHorizonWithoutPendingBatchSetsLostAt(t *testing.T) {
	for _, loseAnswer := range []bool{false, true} {
		t.Run("lost_answer="+strconv.FormatBool(loseAnswer), func(t *testing.T) {
			ctx := context.Background()
			e, shard, recs := trimShard(t, 25, 120, 0)
			first := e.processor(t, nil, nil)
			g := first.ShardGuard(e.streamARN, shard)
			g.CommitBatches()
			for done := 0; done < 40; {
				res, err := first.Process(ctx, g, recs[done:40])
				require.NoError(t, err)
				done += res.Committed
			}
			require.Equal(t, recs[39].SequenceNumber, cpItemOf(t, e, shard).Seq)

			p, err := processor.New(e.faulty, processor.Config{Table: e.table,
				BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
			require.NoError(t, err)
			lost := 0
			e.faults.Decide = func(op string) ledgertest.Fault {
				if loseAnswer && op == "TransactWriteItems" && lost == 0 {
					lost++
					return ledgertest.LoseAnswer
				}
				return ledgertest.Pass
			}
			defer func() { e.faults.Decide = nil }()
			g = trimmedGuard(p, e, shard, recs[39].SequenceNumber)
			// The records after the checkpoint were trimmed: the reader
			// holds only those from the trim point on.
			_, err = p.Process(ctx, g, recs[50:])
			require.NoError(t, err)
			cp := cpItemOf(t, e, shard)
			assert.Equal(t, recs[len(recs)-1].SequenceNumber, cp.Seq)
			assert.Nil(t, cp.Pending)
			assert.NotEmpty(t, cp.LostAt, "the gap is named on the checkpoint")
			assert.Equal(t, int64(1), lossesOf(t, e))

			a := table.Abandon{Shard: shard, Prev: cp.Seq, Now: time.Now()}
			in := table.AbandonTx(table.CoordinationTableName(e.table), aggregates.CheckpointKey(e.streamARN, shard), a)
			_, err = e.ddb.TransactWriteItems(ctx, in)
			require.NoError(t, err)
			// A fresh request (another client token: the SDK fills one in
			// and a retry of the same input reuses it) of the same abandon.
			_, err = e.ddb.TransactWriteItems(ctx, table.AbandonTx(table.CoordinationTableName(e.table), aggregates.CheckpointKey(e.streamARN, shard), a))
			require.Error(t, err, "the same abandon sent again fails its condition")
			assert.True(t, table.AbandonLanded(cpItemOf(t, e, shard), a))
			assert.Equal(t, int64(2), lossesOf(t, e))
		})
	}
}

// trimmingStreams answers TrimmedDataAccessException to an iterator asked
// after a sequence number, as AWS does when the records after a checkpoint
// were trimmed; the reader then opens at TRIM_HORIZON.
type trimmingStreams struct{ processor.StreamReader }

func (s trimmingStreams) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	if in.ShardIteratorType == streamtypes.ShardIteratorTypeAfterSequenceNumber {
		return nil, &streamtypes.TrimmedDataAccessException{Message: aws.String("trimmed (test)")}
	}
	return s.StreamReader.GetShardIterator(ctx, in, opts...)
}

// The tumbling-window Lambda's commit (CommitShardRange) goes through the
// same abandon transaction when its shard's records after a pending
// layout-6 batch's checkpoint were trimmed: lostAt, losses once, the
// checkpoint at the range's end. Fails without the abandon transaction
// (no lostAt, losses 0).
func TestAbandon_TumblingWindowTrimAbandonsThePendingBatchWithLostAt(t *testing.T) {
	ctx := context.Background()
	e, shard, recs := trimShard(t, 26, 150, 0)
	halfCommitted(t, e, recs, shard, 60)
	require.Contains(t, cpItemOf(t, e, shard).Pending.Plan, "/6/")

	p := fastProcessor(t, e, e.ddb)
	last := recs[len(recs)-1].SequenceNumber
	_, err := p.CommitShardRange(ctx, trimmingStreams{e.streams}, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: recs[80].SequenceNumber, Last: last}, 100)
	require.NoError(t, err)
	cp := cpItemOf(t, e, shard)
	assert.Equal(t, last, cp.Seq)
	assert.Nil(t, cp.Pending)
	assert.NotEmpty(t, cp.LostAt)
	assert.Equal(t, int64(1), lossesOf(t, e))
}

// horizonAfter answers TrimmedDataAccessException to an iterator asked
// after a sequence number, and opens TRIM_HORIZON after seq: every record
// up to seq was trimmed.
type horizonAfter struct {
	processor.StreamReader
	seq string
}

func (s horizonAfter) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	switch in.ShardIteratorType {
	case streamtypes.ShardIteratorTypeAfterSequenceNumber:
		return nil, &streamtypes.TrimmedDataAccessException{Message: aws.String("trimmed (test)")}
	case streamtypes.ShardIteratorTypeTrimHorizon:
		c := *in
		c.ShardIteratorType, c.SequenceNumber = streamtypes.ShardIteratorTypeAfterSequenceNumber, aws.String(s.seq)
		return s.StreamReader.GetShardIterator(ctx, &c, opts...)
	}
	return s.StreamReader.GetShardIterator(ctx, in, opts...)
}

// A window whose every record was trimmed (the trim horizon after its
// last record: no Process call) still sends the abandon transaction
// (review of 9caf92b, session 22): the pending batch is given up with
// lostAt and the loss count, and (session 23, T23-2) the checkpoint then
// moves over the window's trimmed records to its last one, within the gap
// counted. Fails with moveOver's plain Checkpoint (the pending batch
// stays, no lostAt, losses 0).
func TestAbandon_TumblingWindowTrimWithNoRecordInTheWindowSetsLostAt(t *testing.T) {
	ctx := context.Background()
	e, shard, recs := trimShard(t, 26, 150, 0)
	halfCommitted(t, e, recs, shard, 60)
	before := cpItemOf(t, e, shard)
	require.NotNil(t, before.Pending)
	require.Greater(t, len(recs), 101)

	p := fastProcessor(t, e, e.ddb)
	last := recs[100].SequenceNumber
	res, err := p.CommitShardRange(ctx, horizonAfter{e.streams, last}, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: recs[80].SequenceNumber, Last: last}, 100)
	require.NoError(t, err)
	assert.Zero(t, res.Committed)
	cp := cpItemOf(t, e, shard)
	assert.Equal(t, last, cp.Seq, "moved over the window's trimmed records")
	assert.Equal(t, last, cp.LostAfter)
	assert.Nil(t, cp.Pending)
	assert.NotEmpty(t, cp.LostAt)
	assert.Equal(t, int64(1), lossesOf(t, e))
}

// An abandon that fails (every attempt dropped) fails the call and is
// tried again at the next one, on the same state: it lands then, once.
// Fails if the first failure forgets the trim (no lostAt, losses 0).
func TestAbandon_AFailedAbandonIsTriedAgainOnTheSameState(t *testing.T) {
	ctx := context.Background()
	e, shard, recs := trimShard(t, 27, 150, 0)
	start := halfCommitted(t, e, recs, shard, 60)

	p, err := processor.New(e.faulty, processor.Config{Table: e.table, MaxAttempts: 2,
		BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
	require.NoError(t, err)
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op == "TransactWriteItems" {
			return ledgertest.Drop
		}
		return ledgertest.Pass
	}
	defer func() { e.faults.Decide = nil }()
	g := trimmedGuard(p, e, shard, recs[start-1].SequenceNumber)
	_, err = p.Process(ctx, g, recs[80:])
	require.Error(t, err)
	require.NotNil(t, cpItemOf(t, e, shard).Pending, "nothing landed")
	require.Zero(t, lossesOf(t, e))

	e.faults.Decide = nil
	_, err = p.Process(ctx, g, recs[80:])
	require.NoError(t, err)
	cp := cpItemOf(t, e, shard)
	assert.Equal(t, recs[len(recs)-1].SequenceNumber, cp.Seq)
	assert.Nil(t, cp.Pending)
	assert.NotEmpty(t, cp.LostAt)
	assert.Equal(t, int64(1), lossesOf(t, e))
}

// Session 23 (docs/exactly-once.md, "Trims, session 23"): the trim point
// (Trimmed(after)), one count per gap (lostAfter), a closed shard's
// trimmed tail.

// committedTo commits recs[:n] as batches by a consumer of its own, so
// that the checkpoint stands at recs[n-1] with no pending batch.
func committedTo(t *testing.T, e *env, recs []processor.Record, shard string, n int) {
	t.Helper()
	ctx := context.Background()
	p := e.processor(t, nil, nil)
	g := p.ShardGuard(e.streamARN, shard)
	g.CommitBatches()
	for done := 0; done < n; {
		res, err := p.Process(ctx, g, recs[done:n])
		require.NoError(t, err)
		done += res.Committed
	}
	require.Equal(t, recs[n-1].SequenceNumber, cpItemOf(t, e, shard).Seq)
}

// pendingFrom leaves a half-committed batch (recs[from-1], recs[end-1]]
// on a checkpoint standing at recs[from-1]: the live owner's batch, two
// groups landed, the rest dropped.
func pendingFrom(t *testing.T, e *env, recs []processor.Record, shard string, from, end int) {
	t.Helper()
	committedTo(t, e, recs, shard, from)
	p, err := processor.New(e.faulty, processor.Config{Table: e.table, MaxItemsPerRun: 2, MaxEntriesPerItem: 2,
		MaxAttempts: 2, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
	require.NoError(t, err)
	commits := 0
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op == "TransactWriteItems" {
			if commits++; commits > 2 {
				return ledgertest.Drop
			}
		}
		return ledgertest.Pass
	}
	defer func() { e.faults.Decide = nil }()
	g := p.ShardGuard(e.streamARN, shard)
	g.CommitBatches()
	g.SetOrigin(recs[from-1].SequenceNumber)
	_, err = p.Process(context.Background(), g, recs[from:end])
	require.Error(t, err)
	cp := cpItemOf(t, e, shard)
	require.Equal(t, recs[from-1].SequenceNumber, cp.Seq)
	require.NotNil(t, cp.Pending, "the crash must leave a half-committed batch")
	require.Equal(t, recs[end-1].SequenceNumber, cp.Pending.To)
}

// T23-1. A stale reader (its lease lost, not yet fenced) that met a trim
// after a position before the checkpoint abandons nothing: the live
// owner's pending batch stays, the loss count does not move, and the
// reader is told to reopen after the checkpoint (ErrGap), at Process and
// at a move outside a commit (AbandonTrimmed) alike; the live owner then
// finishes its batch and every report is exact. Fails without the trim
// point (Trimmed ignoring after): the stale reader abandons the live
// owner's batch (losses 1, the batch gone, its records lost).
func TestAbandon_AStaleReaderWhoseTrimPointIsBeforeTheCheckpointAbandonsNothing(t *testing.T) {
	ctx := context.Background()
	e, shard, recs := trimShard(t, 28, 150, 100)
	pendingFrom(t, e, recs, shard, 40, 80)
	before := cpItemOf(t, e, shard)

	p := e.processor(t, nil, nil)
	stale := p.ShardGuard(e.streamARN, shard)
	stale.CommitBatches()
	stale.Trimmed(recs[20].SequenceNumber) // it had read up to recs[20] when its lease was lost
	_, err := stale.AbandonTrimmed(ctx)
	require.ErrorIs(t, err, processor.ErrGap)
	_, err = p.Process(ctx, stale, recs[90:])
	require.ErrorIs(t, err, processor.ErrGap, "the records from the trim horizon do not reach back to the checkpoint")
	cp := cpItemOf(t, e, shard)
	assert.Equal(t, before.Seq, cp.Seq)
	require.NotNil(t, cp.Pending, "the live owner's batch is not abandoned")
	assert.Equal(t, before.Pending.To, cp.Pending.To)
	assert.Empty(t, cp.LostAt)
	assert.Zero(t, lossesOf(t, e))

	// Records handed over that reach back to the checkpoint are
	// contiguous with it: the stale guard's trim proves nothing about
	// them, and they are processed (here: the pending batch is finished).
	owner := p.ShardGuard(e.streamARN, shard)
	owner.CommitBatches()
	owner.Trimmed(recs[20].SequenceNumber)
	res, err := p.Process(ctx, owner, recs[39:])
	require.NoError(t, err)
	assert.Equal(t, len(recs)-39, res.Committed)
	assert.Zero(t, lossesOf(t, e))
	assert.Empty(t, cpItemOf(t, e, shard).LostAt)
	e.requireReconciled(t)
}

// overtaking moves the shard's checkpoint (another consumer's commit of
// recs (from, to]) right before the first abandon transaction is sent.
type overtaking struct {
	processor.DynamoDB
	t      *testing.T
	e      *env
	shard  string
	recs   []processor.Record
	from   int
	to     int
	fired  bool
	mu     sync.Mutex
	abands int
}

func (o *overtaking) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	o.mu.Lock()
	abandon := len(in.TransactItems) == 2 && in.TransactItems[1].Update != nil &&
		table.KeyOf(in.TransactItems[1].Update.Key) == aggregates.LossesKey()
	if abandon {
		o.abands++
	}
	fire := abandon && !o.fired
	o.fired = o.fired || fire
	o.mu.Unlock()
	if fire {
		other := o.e.processor(o.t, nil, nil)
		g := other.ShardGuard(o.e.streamARN, o.shard)
		g.CommitBatches()
		g.SetOrigin(o.recs[o.from-1].SequenceNumber)
		if _, err := other.Process(ctx, g, o.recs[o.from:o.to]); err != nil {
			return nil, err
		}
	}
	return o.DynamoDB.TransactWriteItems(ctx, in, opts...)
}

// T23-1, second half. An abandon overtaken by another consumer's move is
// decided again on the state it moved to: at or before the trim point, the
// gap after that state is ours and is counted (lostAt, losses once); past
// it, nothing is abandoned and the reader is told to reopen after it
// (ErrGap). Fails on the first case with the old rule (an overtaken
// abandon forgets the trim: the records from the trim horizon commit over
// the gap after the new checkpoint with no lostAt and losses 0).
func TestAbandon_AnAbandonOvertakenByAnotherConsumerIsDecidedAgainOnTheNewState(t *testing.T) {
	for _, tc := range []struct {
		name    string
		after   int // the trim was met after recs[after]
		wantGap bool
	}{
		{"moved to before the trim point: the gap after it is counted", 59, false},
		{"moved past the trim point: reopen after it", 45, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e, shard, recs := trimShard(t, 29, 150, 100)
			committedTo(t, e, recs, shard, 40)

			o := &overtaking{DynamoDB: e.ddb, t: t, e: e, shard: shard, recs: recs, from: 40, to: 50}
			p, err := processor.New(o, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
			require.NoError(t, err)
			g := trimmedGuard(p, e, shard, recs[tc.after].SequenceNumber)
			_, err = p.Process(ctx, g, recs[70:])
			cp := cpItemOf(t, e, shard)
			if tc.wantGap {
				require.ErrorIs(t, err, processor.ErrGap)
				assert.Equal(t, recs[49].SequenceNumber, cp.Seq)
				assert.Empty(t, cp.LostAt)
				assert.Zero(t, lossesOf(t, e))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, 2, o.abands, "the overtaken abandon, then one on the new state")
			assert.Equal(t, recs[len(recs)-1].SequenceNumber, cp.Seq)
			assert.NotEmpty(t, cp.LostAt, "the gap after the new checkpoint is named")
			assert.Equal(t, int64(1), lossesOf(t, e))
		})
	}
}

// T23-2. One gap, one move of the loss count: a second consumer meeting
// the trim after the same checkpoint (no pending batch) finds the gap
// counted (lostAfter) and moves nothing; and the tumbling window's retry
// after an abandon that landed (the invocation failed at a later commit)
// meets the trim again after the abandon's target and moves nothing
// either. Fails without lostAfter (losses 2 in each part).
func TestAbandon_AGapIsCountedOnceByASecondConsumerAndByTheWindowsRetry(t *testing.T) {
	ctx := context.Background()
	t.Run("two consumers", func(t *testing.T) {
		e, shard, recs := trimShard(t, 30, 120, 0)
		committedTo(t, e, recs, shard, 40)
		for i := range 2 {
			g := trimmedGuard(e.processor(t, nil, nil), e, shard, recs[39].SequenceNumber)
			cp, err := g.AbandonTrimmed(ctx)
			require.NoError(t, err)
			assert.Equal(t, recs[39].SequenceNumber, cp)
			assert.Equal(t, int64(1), lossesOf(t, e), "consumer %d", i+1)
		}
		cp := cpItemOf(t, e, shard)
		assert.NotEmpty(t, cp.LostAt)
		assert.Equal(t, recs[39].SequenceNumber, cp.LostAfter)

		// A third consumer read the checkpoint before the gap was
		// counted and sends its abandon anyway: it fails its condition
		// (lostAfter), and the answer is "not landed", not an error.
		key := aggregates.CheckpointKey(e.streamARN, shard)
		landed, err := e.processor(t, nil, nil).AbandonCheckpoint(ctx, key, table.Abandon{Shard: shard, Prev: recs[39].SequenceNumber, Now: time.Now()})
		require.NoError(t, err)
		assert.False(t, landed)
		assert.Equal(t, int64(1), lossesOf(t, e))
	})
	t.Run("the mapping's retry after a landed abandon", func(t *testing.T) {
		e, shard, recs := trimShard(t, 31, 150, 0)
		pendingFrom(t, e, recs, shard, 40, 60)
		p, err := processor.New(e.faulty, processor.Config{Table: e.table, MaxAttempts: 2,
			BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
		require.NoError(t, err)
		sent := 0
		e.faults.Decide = func(op string) ledgertest.Fault {
			if op == "TransactWriteItems" {
				if sent++; sent > 1 {
					return ledgertest.Drop // the abandon lands, every commit after it fails
				}
			}
			return ledgertest.Pass
		}
		defer func() { e.faults.Decide = nil }()
		r := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[80].SequenceNumber, Last: recs[len(recs)-1].SequenceNumber}
		_, err = p.CommitShardRange(ctx, trimmingStreams{e.streams}, r, 100)
		require.Error(t, err)
		cp := cpItemOf(t, e, shard)
		require.Equal(t, recs[59].SequenceNumber, cp.Seq, "the abandon landed")
		require.Equal(t, int64(1), lossesOf(t, e))

		e.faults.Decide = nil
		_, err = p.CommitShardRange(ctx, trimmingStreams{e.streams}, r, 100)
		require.NoError(t, err)
		cp = cpItemOf(t, e, shard)
		assert.Equal(t, r.Last, cp.Seq)
		assert.Equal(t, int64(1), lossesOf(t, e), "the retry meets the same gap: not counted again")
	})
}

// closedAndTrimmed is a closed shard whose every record after the
// checkpoint was trimmed: an iterator asked after a sequence number is
// refused (TrimmedDataAccessException), TRIM_HORIZON opens an iterator
// whose first page is empty with no next iterator (the shard's end).
type closedAndTrimmed struct{ processor.StreamReader }

const closedEnd = "closed-and-trimmed"

func (s closedAndTrimmed) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	switch in.ShardIteratorType {
	case streamtypes.ShardIteratorTypeAfterSequenceNumber:
		return nil, &streamtypes.TrimmedDataAccessException{Message: aws.String("trimmed (test)")}
	case streamtypes.ShardIteratorTypeTrimHorizon:
		return &dynamodbstreams.GetShardIteratorOutput{ShardIterator: aws.String(closedEnd)}, nil
	}
	return s.StreamReader.GetShardIterator(ctx, in, opts...)
}

func (s closedAndTrimmed) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	if aws.ToString(in.ShardIterator) == closedEnd {
		return &dynamodbstreams.GetRecordsOutput{}, nil
	}
	return s.StreamReader.GetRecords(ctx, in, opts...)
}

// T23-3. A tumbling window on a closed shard whose every record after the
// checkpoint was trimmed reaches the shard's end before its last record:
// the pending batch is abandoned once (lostAt, losses 1) and the
// checkpoint moves over the trimmed records to the window's last one, so
// that the mapping's retry succeeds and moves nothing; a later window of
// the shard, in the same trimmed tail, moves the checkpoint on within the
// gap counted, the count unmoved; the same with the answers of the first
// abandon and of the first move lost. Fails without it: every call
// returns "ended before record" and the count never moves.
func TestAbandon_AClosedShardsTrimmedTailIsAbandonedOnceAndTheWindowsRetrySucceeds(t *testing.T) {
	for _, loseAnswers := range []bool{false, true} {
		t.Run("lost_answers="+strconv.FormatBool(loseAnswers), func(t *testing.T) {
			ctx := context.Background()
			e, shard, recs := trimShard(t, 32, 150, 101)
			pendingFrom(t, e, recs, shard, 40, 60)

			// With loseAnswers, the first abandon's answer and the first
			// move's (CarryLoss) are lost: both landed.
			lost := map[string]bool{}
			e.faults.Decide = func(op string) ledgertest.Fault {
				if loseAnswers && (op == "TransactWriteItems" || op == "UpdateItem") && !lost[op] {
					lost[op] = true
					return ledgertest.LoseAnswer
				}
				return ledgertest.Pass
			}
			defer func() { e.faults.Decide = nil }()
			p := fastProcessor(t, e, e.faulty)
			r := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[80].SequenceNumber, Last: recs[100].SequenceNumber}
			for try := range 3 {
				res, err := p.CommitShardRange(ctx, closedAndTrimmed{e.streams}, r, 100)
				require.NoError(t, err, "try %d", try+1)
				assert.Zero(t, res.Committed)
				cp := cpItemOf(t, e, shard)
				assert.Equal(t, r.Last, cp.Seq, "try %d: the checkpoint moved over the trimmed records", try+1)
				assert.Nil(t, cp.Pending)
				assert.NotEmpty(t, cp.LostAt)
				assert.Equal(t, int64(1), lossesOf(t, e), "try %d: one loss, one move", try+1)
			}
			assert.Equal(t, loseAnswers, lost["TransactWriteItems"] && lost["UpdateItem"])
			next := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[101].SequenceNumber, Last: recs[len(recs)-1].SequenceNumber}
			_, err := p.CommitShardRange(ctx, closedAndTrimmed{e.streams}, next, 100)
			require.NoError(t, err)
			cp := cpItemOf(t, e, shard)
			assert.Equal(t, next.Last, cp.Seq)
			assert.Equal(t, next.Last, cp.LostAfter)
			assert.Equal(t, int64(1), lossesOf(t, e), "the same trimmed tail: not counted again")
		})
	}
}
