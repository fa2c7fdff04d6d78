package poller_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// Review (adversarial, session 24) of the lead's changes of session 23
// (docs/exactly-once.md, "Review (adversarial, session 24): the lead's
// changes of session 23").

// beforeFirstRead runs other once, before the first GetRecords answer.
type beforeFirstRead struct {
	poller.Streams
	once  sync.Once
	other func(ctx context.Context)
}

func (s *beforeFirstRead) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	s.once.Do(func() { s.other(ctx) })
	return s.Streams.GetRecords(ctx, in, opts...)
}

// S24-L2. A loss another consumer counted during the drain. The drain's
// reader opens after the checkpoint c; before its first page, the shard's
// live owner (a lease the drain asked for, not yet handed over; a stale
// owner) meets a trim after c, counts the gap (LOSSES) and commits on from
// the trim horizon. The drain then finds every record it reads at or
// before the owner's checkpoint, meets no trim itself and, on s23 (the
// DrainLossError built from its own readers' trims only), exits 0 although
// records readable at its start were lost. The drain now reads the loss
// count at its start and at its exit: a count that moved meanwhile makes
// the exit a DrainLossError (Counted). Fails without the fix (Run nil).
func TestReviewS24_ADrainDuringWhichAnotherConsumerCountedALossSaysSo(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2402)
	f := e.stream
	f.addShard("shardId-A", "")
	all := e.write(t, 60)
	f.appendTo("shardId-A", all...)
	e.drain(t, "p1", nil)
	more := e.write(t, 60)
	f.appendTo("shardId-A", more...)
	require.Greater(t, len(more), 40)
	c := *all[len(all)-1].Dynamodb.SequenceNumber

	other := func(ctx context.Context) {
		p, err := processor.New(e.ddb, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}, nil)
		require.NoError(t, err)
		g := p.ShardGuard(f.arn, "shardId-A")
		g.CommitBatches()
		g.Trimmed(c) // the records after c up to the trim horizon: lost
		var recs []processor.Record
		for _, r := range more[len(more)-20:] {
			recs = append(recs, processor.FromStream(r, f.arn))
		}
		for done := 0; done < len(recs); {
			res, err := p.Process(ctx, g, recs[done:])
			require.NoError(t, err)
			done += res.Committed
		}
	}
	s := &beforeFirstRead{Streams: f.client("p2"), other: other}
	tp := e.poller(t, "p2", s, nil, func(c *poller.Config) { c.Drain, c.LeaseDuration = true, 30*time.Second })
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	derr := tp.Run(dctx)
	require.NoError(t, dctx.Err(), "the drain did not exit")

	losses, err := table.GetLosses(ctx, e.ddb, table.CoordinationTableName(e.table))
	require.NoError(t, err)
	require.Equal(t, int64(1), losses, "the other consumer counted the gap")
	require.ErrorIs(t, derr, poller.ErrDrainLost, "records readable at the drain's start were lost during it: not exit 0")
	var lost *poller.DrainLossError
	require.ErrorAs(t, derr, &lost)
	assert.Empty(t, lost.Trims, "the drain met no trim itself")
	assert.Equal(t, int64(1), lost.Counted)
	assert.Contains(t, derr.Error(), "counted")
}
