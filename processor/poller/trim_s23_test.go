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

// overtakenAtTrim is the stream as a reader sees it when another consumer
// (the live owner after a lease change) commits past the reader's
// position and the records after that position are trimmed: at the
// reader's second GetRecords on the shard, owner runs, then the trim
// horizon jumps trim records past the reader's iterator.
type overtakenAtTrim struct {
	poller.Streams
	f     *fakeStream
	shard string
	trim  int
	owner func(ctx context.Context)
	mu    sync.Mutex
	reads int
}

func (s *overtakenAtTrim) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	s.mu.Lock()
	s.reads++
	fire := s.reads == 2
	s.mu.Unlock()
	if fire {
		s.owner(ctx)
		s.f.mu.Lock()
		s.f.trimOnRead[s.shard] = s.trim
		s.f.mu.Unlock()
	}
	return s.Streams.GetRecords(ctx, in, opts...)
}

// T23-1 in the reader (docs/exactly-once.md, "Trims, session 23"): a
// reader meets a trim on a read after its position a while another
// consumer has committed past a (beyond the new trim horizon). The reader
// passes its own position to the guard (Trimmed(a)); the checkpoint is
// past it, the records from the trim horizon reach back to it, so nothing
// is abandoned and nothing counted: no lostAt, losses 0, and the reports
// exact (nothing lost, nothing applied twice). Fails when the reader's
// trim abandons at whatever checkpoint it reads (the rule before session
// 23: lostAt set, losses 1).
func TestPoller_ATrimMetAfterAPositionTheCheckpointPassedAbandonsNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 41)
	f := e.stream
	f.addShard("shardId-A", "")
	all := e.write(t, 200)
	f.appendTo("shardId-A", all...)
	e.drain(t, "p1", nil)
	more := e.write(t, 300)
	f.appendTo("shardId-A", more...)
	all = append(all, more...)
	require.Greater(t, len(all), 420)
	base := len(all) - len(more) // the reader's first page starts here

	owner := func(ctx context.Context) {
		p, err := processor.New(e.ddb, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}, nil)
		require.NoError(t, err)
		g := p.ShardGuard(f.arn, "shardId-A")
		g.CommitBatches()
		recs := make([]processor.Record, 0, 160)
		for _, r := range all[base : base+160] {
			recs = append(recs, processor.FromStream(r, f.arn))
		}
		for done := 0; done < len(recs); {
			res, err := p.Process(ctx, g, recs[done:])
			require.NoError(t, err)
			done += res.Committed
		}
	}
	s := &overtakenAtTrim{Streams: f.client("p2"), f: f, shard: "shardId-A", trim: 40, owner: owner}
	tp := e.poller(t, "p2", s, nil, func(c *poller.Config) {
		c.Drain, c.MaxRecords, c.LeaseDuration = true, 100, 30*time.Second
	})
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	require.NoError(t, tp.Run(dctx))
	require.NoError(t, dctx.Err(), "the drain did not exit")

	assert.Equal(t, 1.0, counter(t, tp.m.Resets.WithLabelValues(poller.ResetTrimmed)), "the trim was met")
	losses, err := table.GetLosses(ctx, e.ddb, table.CoordinationTableName(e.table))
	require.NoError(t, err)
	assert.Zero(t, losses, "nothing after the other consumer's checkpoint was lost")
	_, cps, err := table.ReadStreamState(ctx, e.ddb, table.CoordinationTableName(e.table), f.arn, nil)
	require.NoError(t, err)
	assert.Empty(t, cps["shardId-A"].LostAt)
	assert.Equal(t, *all[len(all)-1].Dynamodb.SequenceNumber, cps["shardId-A"].Seq)
	e.requireReconciled(t)
}
