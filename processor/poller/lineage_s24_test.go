package poller_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// slowCoord answers every read and write of a coordinator delay late (the
// write landing first), as a loaded table answers a giver busy with a
// day's walk: its readers' ends queue behind its rounds.
type slowCoord struct {
	poller.Table
	delay time.Duration
}

func (s slowCoord) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(s.delay):
		return nil
	}
}

func (s slowCoord) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Table.Query(ctx, in, opts...)
}

func (s slowCoord) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := s.Table.UpdateItem(ctx, in, opts...)
	if werr := s.wait(ctx); werr != nil && err == nil {
		return nil, werr
	}
	return out, err
}

// Issue 23, the joiner's under-hand (BENCHMARKS.md, "Session 23: the paced
// fleet"; docs/exactly-once.md, "A hand-over finished by the giver's
// reader (session 24)"). A holder whose shards close under it (every open
// shard rolls every second) and whose coordinator is busy hands a joiner
// leases whose readers have already read them to their end: the reader's
// end, waiting for the coordinator, is a finished shard, released as
// finished, not handed over, and before the fix the holder registered and
// took the child itself, so the joiner stayed under its share (in the
// fleet benchmark until its own listing, 70 s later; here its listing is
// refused for the whole test). With the fix one child of each such shard
// is offered to the joiner: it reaches its floor less one within two lease
// durations of its first heartbeat, and never passes its ceiling (the
// hand-over in transit is counted at the holder and at the joiner, never
// at neither).
func TestPoller_AJoinerGetsAChildOfEachShardItsGiversReaderFinishedFirst(t *testing.T) {
	ddbtest.Long(t)
	const shards = 12
	const lease = 3 * time.Second // hbPoller's (fastConfig)
	e := newEmuEnv(t, 2401, streamemu.Config{Shards: shards, Seed: 2401})
	for i := range shards {
		e.w.Branches = append(e.w.Branches, fmt.Sprintf("branch-%02d", i))
	}
	e.write(t, 60)
	a, stopA, b, stopB, listing := e.holderWithAndUnlistedJoiner(t, shards,
		func(api poller.Table) poller.Table { return slowCoord{Table: api, delay: 40 * time.Millisecond} })
	joined := time.Now()
	closing := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-closing:
				return
			case <-time.After(time.Second):
			}
			for _, sh := range e.s.Shards() {
				if !sh.Closed {
					_, _ = e.s.Close(sh.ID, false) // a roll: the open shards stay shards
				}
			}
			_ = e.w.Run(context.Background(), e.ddb, e.table, 6)
		}
	}()
	floor, ceiling := shards/2-1, (shards+1)/2
	coord := table.CoordinationTableName(e.table)
	var peak int
	var reached time.Duration
	for until := time.Now().Add(60 * lease); time.Now().Before(until); time.Sleep(100 * time.Millisecond) {
		ls, _, err := table.ReadLeasePage(context.Background(), e.ddb, coord, e.stream.arn, nil, 1000)
		require.NoError(t, err)
		named := 0
		for _, l := range ls {
			if l.Owner == "b" && !l.Finished {
				named++
			}
		}
		held := int(counter(t, b.m.LeasesHeld))
		peak = max(peak, named, held)
		if reached == 0 && held >= floor {
			reached = time.Since(joined)
		}
		if reached != 0 && time.Since(joined) > reached+4*lease {
			break // watched for its peak a while after
		}
	}
	close(closing)
	wg.Wait()
	require.True(t, listing.shut.Load())
	require.Positive(t, listing.pages.Load(), "b's listing was never refused: the test proves nothing")
	finishedFirst := logged(a.logs.lines(), "a shard handed over was finished")
	t.Logf("b reached %d leases %s after it joined (its first beats take about a renewal interval); its peak %d, its ceiling %d; a passed on %d children",
		floor, reached.Round(10*time.Millisecond), peak, ceiling, finishedFirst)
	require.NotZero(t, reached, "b never reached its floor less one (%d) while its listing was refused", floor)
	// Two lease durations from b's first beats: it starts, writes its
	// item and beats again before a counts it (about a renewal interval).
	assert.LessOrEqual(t, reached, 2*lease+lease/3+lease, "b reached its floor less one later than two lease durations after it was seen")
	assert.LessOrEqual(t, peak, ceiling, "a handed b more than its ceiling")

	listing.shut.Store(false)
	e.write(t, 30)
	time.Sleep(2 * time.Second)
	stopB()
	stopA()
	end := time.Now()
	requireNoOverlap(t, append(readerIntervals(t, a.logs.lines(), end), readerIntervals(t, b.logs.lines(), end)...))
	e.finish(t, nil)
}
