package poller_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
)

// brownout is a Streams API in front of the scripted stream that starts a
// brownout the moment it serves a closed shard's last page (records and no
// next iterator): the commits of that page fail, and so does the reopen
// that follows (one GetShardIterator); then everything recovers.
type brownout struct {
	poller.Streams
	phase atomic.Int32 // 0 before, 1 during, 2 after
}

func (b *brownout) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	out, err := b.Streams.GetRecords(ctx, in, opts...)
	if err == nil && out.NextShardIterator == nil && len(out.Records) > 0 {
		b.phase.CompareAndSwap(0, 1)
	}
	return out, err
}

func (b *brownout) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	if b.phase.CompareAndSwap(1, 2) {
		return nil, &st.InternalServerError{Message: new(string)}
	}
	return b.Streams.GetShardIterator(ctx, in, opts...)
}

// Issue 12, defect 1: a closed shard's last page comes without a next
// iterator. When its commit fails and the reopen after it fails too, the
// reader must not take the nil iterator for "read to the end": it reopens
// after the checkpoint, reads the page again and commits it before the
// shard is marked finished.
func TestPoller_ClosedShardsLastPageSurvivesFailedCommitAndReopen(t *testing.T) {
	for _, batch := range []int{1000, 10000} {
		t.Run("batch-records="+map[int]string{1000: "1000", 10000: "10000"}[batch], func(t *testing.T) {
			e := newEnv(t, 12)
			f := e.stream
			f.addShard("shardId-A", "")
			f.appendTo("shardId-A", e.write(t, 30)...)
			e.drain(t, "p0", nil) // a checkpoint, so the last page is one batch
			f.appendTo("shardId-A", e.write(t, 120)...)
			f.close("shardId-A")

			b := &brownout{Streams: f.client("p1")}
			api := faultClient(t, func(op string) ledgertest.Fault {
				if op == "TransactWriteItems" && b.phase.Load() == 1 {
					return ledgertest.Throttle
				}
				return ledgertest.Pass
			})
			tp := e.pollerWith(t, "p1", b, api, processor.Config{MaxAttempts: 2}, func(c *poller.Config) {
				c.Drain = true
				c.MaxRecords, c.BatchRecords = 50, batch // pages of 50; the last page has 20
			})
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			require.NoError(t, tp.Run(ctx))
			require.Equal(t, int32(2), b.phase.Load(), "the brownout did not happen")
			e.requireReconciled(t)
		})
	}
}

// firstPageHook runs hook once, before handing out the first page with
// records.
type firstPageHook struct {
	poller.Streams
	once sync.Once
	hook func()
}

func (h *firstPageHook) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	out, err := h.Streams.GetRecords(ctx, in, opts...)
	if err == nil && len(out.Records) > 0 {
		h.once.Do(h.hook)
	}
	return out, err
}

// Issue 12, defect 5, through the poller: it opens a shard without a
// checkpoint at LATEST; before it commits, another reader (opened at
// TRIM_HORIZON, earlier) creates the checkpoint with the shard's first
// records. The poller's records start long after that checkpoint: it must
// reopen after it (ErrGap) and apply the records in between, not commit
// over the gap.
func TestPoller_ReaderWithoutCheckpointReopensAfterAnotherReadersFirstCommit(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 13)
	f := e.stream
	f.addShard("shardId-A", "")
	backlog := e.write(t, 60)
	f.appendTo("shardId-A", backlog...)
	other := func() {
		p, err := processor.New(e.ddb, processor.Config{Table: e.table}, nil)
		require.NoError(t, err)
		var recs []processor.Record
		for _, r := range backlog[:20] {
			recs = append(recs, processor.FromStream(r, f.arn))
		}
		_, err = p.Process(ctx, p.ShardGuard(f.arn, "shardId-A"), recs)
		require.NoError(t, err)
	}
	hooked := &firstPageHook{Streams: f.client("p1"), hook: other}
	tp := e.pollerWith(t, "p1", hooked, nil, processor.Config{}, func(c *poller.Config) { c.StartPosition = poller.Latest })
	stop := start(t, tp)
	eventually(t, "A opened", 20*time.Second, func() bool { return counter(t, tp.m.Reads.WithLabelValues("empty")) > 0 })
	f.appendTo("shardId-A", e.write(t, 40)...)
	eventually(t, "a commit", 60*time.Second, func() bool { return counter(t, tp.pm.Commits.WithLabelValues("committed")) > 0 })
	stop()
	// A drain after it finds nothing left behind the checkpoint: every
	// record after the other reader's checkpoint was applied, once.
	e.drain(t, "p2", nil)
	e.requireReconciled(t)
	assert.Positive(t, counter(t, tp.m.Resets.WithLabelValues(poller.ResetGap)), "the gap was refused")
}
