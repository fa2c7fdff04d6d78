package processor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Review (adversarial, session 22) of the guard-alone abandon as built
// (docs/exactly-once.md, "Review (adversarial, session 22): the
// guard-alone abandon as built").

// abandonThenMoved lands the first abandon transaction (the one acting on
// the loss item), then lets another consumer move the checkpoint on (its
// next claim), then loses the abandon's answer.
type abandonThenMoved struct {
	processor.DynamoDB
	mu   sync.Mutex
	done bool
	move func(ctx context.Context) error
}

func (f *abandonThenMoved) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := f.DynamoDB.TransactWriteItems(ctx, in, opts...)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil || f.done {
		return out, err
	}
	for _, it := range in.TransactItems {
		if u := it.Update; u != nil && table.KeyOf(u.Key) == aggregates.LossesKey() {
			f.done = true
			if merr := f.move(ctx); merr != nil {
				return nil, merr
			}
			return nil, &ddbtypes.InternalServerError{Message: aws.String("the answer was lost")}
		}
	}
	return out, err
}

// S22-AB-1: the abandon lands, its answer is lost, and before the re-read
// another consumer (a lease change; the Lambda's next window) claims the
// checkpoint on from the abandon's target. The re-read shows neither the
// state read (AbandonStands) nor the target without a pending batch, so
// AbandonCheckpoint said "not landed": `ledgerctl abandon-batch` exited 2
// with "nothing abandoned" though the batch was abandoned and the loss
// count moved, and the guard skipped its abandoned_batch count and its
// error log. lostAt, written only by abandon transactions, each with its
// own instant, and left alone by every claim, recognises the landing.
// Fails on s22-abandon's head (landed false).
func TestReviewS22_AbandonLandedThenMovedOnIsRecognisedByLostAt(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(26).Run(ctx, e.ddb, e.table, 120))
	shard, recs := e.records(t)
	halfCommitted(t, e, recs, shard, 60)
	before := cpItemOf(t, e, shard)
	require.NotNil(t, before.Pending, "a half-committed batch")

	coord := table.CoordinationTableName(e.table)
	key := aggregates.CheckpointKey(e.streamARN, shard)
	later := recs[len(recs)-1].SequenceNumber
	f := &abandonThenMoved{DynamoDB: e.ddb, move: func(ctx context.Context) error {
		// The other consumer's move from the abandon's target (of the
		// position only, as every claim is; in the fenced layout of
		// protocol 4, as this version writes it).
		_, err := e.ddb.UpdateItem(ctx, table.AdvanceCheckpoint(coord, key, shard, before.Pending.To, later, false, time.Now()))
		return err
	}}
	p, err := processor.New(f, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
	require.NoError(t, err)
	a := table.Abandon{Shard: shard, Prev: before.Seq, Pending: before.Pending, Now: time.Now().UTC()}
	landed, err := p.AbandonCheckpoint(ctx, key, a)
	require.NoError(t, err)
	require.True(t, f.done, "the abandon was sent and the checkpoint moved on")
	cp := cpItemOf(t, e, shard)
	assert.Equal(t, later, cp.Seq)
	assert.Equal(t, a.Now.Format(time.RFC3339Nano), cp.LostAt)
	assert.Equal(t, int64(1), lossesOf(t, e))
	assert.True(t, landed, "the abandon landed (lostAt is its own), though the checkpoint moved on before the re-read")
}
