package table_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/table"
)

// workerArn is the stream the worker tests' items belong to.
const workerArn = "arn:aws:dynamodb:us-east-1:000000000000:table/worker/stream/2026-01-01T00:00:00.000"

// workerTable is a fresh table's coordination table on DynamoDB Local,
// with the context and client the worker tests write it with.
func workerTable(t *testing.T) (context.Context, *dynamodb.Client, string) {
	t.Helper()
	c := ddbtest.Client(t)
	return context.Background(), c, table.CoordinationTableName(ddbtest.NewTable(t, c))
}

// conditionFailed reports whether err is a failed condition.
func conditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// The worker heartbeat's conditional writes (docs/exactly-once.md, "The
// worker heartbeat", claim H1), on DynamoDB Local: a fence lands only at
// the beat its writer saw; once it has landed, no heartbeat lands (the
// owner's leases can no longer be extended) until the owner rejoins; a
// heartbeat landed after the taker's read makes the fence fail. A poller
// that renews every lease heartbeats without the condition and without
// leaseMode.
func TestWorker_AFenceRefusesLaterHeartbeatsUntilTheOwnerRejoins(t *testing.T) {
	ctx, c, coord := workerTable(t)
	now := time.Now()
	beat := func(hb bool) (table.Worker, error) {
		out, err := c.UpdateItem(ctx, table.HeartbeatWorker(coord, workerArn, "o", "inc-o", 3, hb, now))
		if err != nil {
			return table.Worker{}, err
		}
		return table.DecodeWorker(out.Attributes), nil
	}

	w, err := beat(true)
	require.NoError(t, err)
	assert.Equal(t, int64(1), w.Beat)
	assert.True(t, w.Heartbeat, "a heartbeat poller's item says leaseMode = heartbeat")
	w, err = beat(true)
	require.NoError(t, err)
	require.Equal(t, int64(2), w.Beat)

	// A taker that saw beat 1 is too late: the owner heartbeated since.
	_, err = c.UpdateItem(ctx, table.FenceWorker(coord, workerArn, "o", 1))
	assert.True(t, conditionFailed(err), "a fence at a beat that moved fails: %v", err)
	// One that saw beat 2 fences it, twice as well as once.
	_, err = c.UpdateItem(ctx, table.FenceWorker(coord, workerArn, "o", 2))
	require.NoError(t, err)
	_, err = c.UpdateItem(ctx, table.FenceWorker(coord, workerArn, "o", 2))
	require.NoError(t, err, "fencing again at the same beat (another taker, a retry) succeeds")

	// The owner's heartbeats fail from now on, and change nothing.
	_, err = beat(true)
	assert.True(t, conditionFailed(err), "a heartbeat after the fence fails its condition: %v", err)
	ws, err := table.ReadWorkers(ctx, c, coord, workerArn)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	w = ws[0]
	assert.Equal(t, int64(2), w.Beat, "the refused heartbeat moved no beat")
	assert.True(t, w.Fenced)

	// A drain's ask reaches the fenced item; the rejoin clears fence and
	// asks, and heartbeats land again.
	_, err = c.UpdateItem(ctx, table.AskWorker(coord, workerArn, "o", "shardId-1"))
	require.NoError(t, err)
	out2, err := c.UpdateItem(ctx, table.RejoinWorker(coord, workerArn, "o", "inc-o", false, now))
	require.NoError(t, err)
	w = table.DecodeWorker(out2.Attributes)
	assert.False(t, w.Fenced)
	assert.Empty(t, w.Asks, "the rejoin drops what was asked of the leases it dropped")
	assert.Equal(t, int64(3), w.Beat)
	_, err = beat(true)
	require.NoError(t, err)

	// A renewing poller's heartbeat: no condition, no leaseMode.
	in := table.HeartbeatWorker(coord, workerArn, "old", "inc-old", 1, false, now)
	assert.Nil(t, in.ConditionExpression)
	out2, err = c.UpdateItem(ctx, in)
	require.NoError(t, err)
	assert.False(t, table.DecodeWorker(out2.Attributes).Heartbeat)

	// Asks: added, answered in the heartbeat's answer, cleared.
	_, err = c.UpdateItem(ctx, table.AskWorker(coord, workerArn, "o", "shardId-2"))
	require.NoError(t, err)
	w, err = beat(true)
	require.NoError(t, err)
	assert.Equal(t, []string{"shardId-2"}, w.Asks)
	_, err = c.UpdateItem(ctx, table.ClearAsks(coord, workerArn, "o", []string{"shardId-2"}))
	require.NoError(t, err)
	w, err = beat(true)
	require.NoError(t, err)
	assert.Empty(t, w.Asks)
	// An ask to a poller never registered fails (nobody to answer it).
	_, err = c.UpdateItem(ctx, table.AskWorker(coord, workerArn, "nobody", "shardId-3"))
	assert.True(t, conditionFailed(err), "%v", err)
}

// Two processes given one owner name (docs/exactly-once.md, review of the
// heartbeat, HB6), on DynamoDB Local: the later claim takes the item over,
// and every write of the earlier process after it is refused — its
// heartbeat, its rejoin, its leave, a renewing poller's worker write —
// while the later one's land; a claim (a process's first write) is refused
// by no incarnation, so the retry of a claim whose answer was lost lands.
// A lease carries its taker's incarnation until a release removes it.
func TestWorker_ALaterClaimOfTheSameOwnerRefusesTheEarlierProcesssWrites(t *testing.T) {
	ctx, c, coord := workerTable(t)
	now := time.Now()
	write := func(in *dynamodb.UpdateItemInput) (table.Worker, error) {
		out, err := c.UpdateItem(ctx, in)
		if err != nil {
			return table.Worker{}, err
		}
		return table.DecodeWorker(out.Attributes), nil
	}

	w, err := write(table.HeartbeatWorker(coord, workerArn, "twin", "a", 2, true, now))
	require.NoError(t, err)
	assert.Equal(t, "a", w.Incarnation)
	// The claim's retry (its answer lost) lands again: no incarnation
	// condition on a claim.
	_, err = write(table.HeartbeatWorker(coord, workerArn, "twin", "a", 2, true, now))
	require.NoError(t, err)
	_, err = write(table.HeartbeatWorkerAgain(coord, workerArn, "twin", "a", 2, now))
	require.NoError(t, err)

	// b claims: a's writes are refused from now on, b's land.
	w, err = write(table.HeartbeatWorker(coord, workerArn, "twin", "b", 0, true, now))
	require.NoError(t, err)
	assert.Equal(t, "b", w.Incarnation)
	beat := w.Beat
	for name, in := range map[string]*dynamodb.UpdateItemInput{
		"heartbeat":       table.HeartbeatWorkerAgain(coord, workerArn, "twin", "a", 2, now),
		"rejoin":          table.RejoinWorker(coord, workerArn, "twin", "a", false, now),
		"leave":           table.LeaveWorker(coord, workerArn, "twin", "a", now),
		"renewing poller": table.RenewWorkerAgain(coord, workerArn, "twin", "a", 2, now),
	} {
		_, err := c.UpdateItem(ctx, in)
		assert.True(t, conditionFailed(err), "the earlier process's %s after the later claim: got %v; want a failed condition", name, err)
	}
	ws, err := table.ReadWorkers(ctx, c, coord, workerArn)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	assert.Equal(t, beat, ws[0].Beat, "a refused write moved the beat")
	assert.Equal(t, "b", ws[0].Incarnation)
	assert.False(t, ws[0].Left)
	_, err = write(table.HeartbeatWorkerAgain(coord, workerArn, "twin", "b", 0, now))
	require.NoError(t, err)

	// A fenced item: b's rejoin lands (its own), a claiming rejoin lands
	// whatever the item says.
	_, err = c.UpdateItem(ctx, table.FenceWorker(coord, workerArn, "twin", beat+1))
	require.NoError(t, err)
	_, err = write(table.HeartbeatWorkerAgain(coord, workerArn, "twin", "b", 0, now))
	assert.True(t, conditionFailed(err), "%v", err)
	w, err = write(table.RejoinWorker(coord, workerArn, "twin", "b", false, now))
	require.NoError(t, err)
	assert.False(t, w.Fenced)
	w, err = write(table.RejoinWorker(coord, workerArn, "twin", "c", true, now))
	require.NoError(t, err)
	assert.Equal(t, "c", w.Incarnation)
	_, err = write(table.LeaveWorker(coord, workerArn, "twin", "c", now))
	require.NoError(t, err)

	// A renewing poller's write after its claim re-creates a deleted item
	// and is refused only by another incarnation.
	_, err = write(table.RenewWorkerAgain(coord, workerArn, "renewer", "r", 1, now))
	require.NoError(t, err)

	// Leases: a take writes the taker's incarnation, a release removes it.
	l := table.Lease{Shard: "shardId-1"}
	out, err := c.UpdateItem(ctx, table.TakeLease(coord, workerArn, l, "twin", "b", time.Second, now))
	require.NoError(t, err)
	l = table.DecodeLease("shardId-1", out.Attributes)
	assert.Equal(t, "b", l.Incarnation)
	out, err = c.UpdateItem(ctx, table.ReleaseLease(coord, workerArn, l, "other", false, now))
	require.NoError(t, err)
	l = table.DecodeLease("shardId-1", out.Attributes)
	assert.Equal(t, "other", l.Owner)
	assert.Empty(t, l.Incarnation, "a hand-over removes the giver's incarnation")
}

// A claim made on the incarnation its sender read (ClaimedFrom) lands
// only while the item still names it: one that lands late, after another
// process's claim, is refused and changes nothing; the same claim on a
// fenced item is refused by the fence too, and a claiming rejoin is made
// the same way (session 19's review of HB6, R1).
func TestWorker_AClaimLandsOnlyOnTheIncarnationItsSenderRead(t *testing.T) {
	ctx, c, coord := workerTable(t)
	now := time.Now()
	claim := func(inc, seen string) *dynamodb.UpdateItemInput {
		return table.ClaimedFrom(table.HeartbeatWorker(coord, workerArn, "twin", inc, 0, true, now), seen)
	}
	// a's two claims, both sent on the item absent: the first lands.
	_, err := c.UpdateItem(ctx, claim("a", ""))
	require.NoError(t, err)
	// b claims on what it read (a's).
	_, err = c.UpdateItem(ctx, claim("b", "a"))
	require.NoError(t, err)
	// a's second claim, late: refused, the item still b's.
	_, err = c.UpdateItem(ctx, claim("a", ""))
	assert.True(t, conditionFailed(err), "a late claim on the item absent: got %v; want a failed condition", err)
	_, err = c.UpdateItem(ctx, claim("a", "x"))
	assert.True(t, conditionFailed(err), "a claim on another incarnation than the item's: got %v", err)
	ws, err := table.ReadWorkers(ctx, c, coord, workerArn)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	assert.Equal(t, "b", ws[0].Incarnation)
	beat := ws[0].Beat

	// Fenced: a claim on the right incarnation is refused by the fence; a
	// claiming rejoin on it lands and clears the fence.
	_, err = c.UpdateItem(ctx, table.FenceWorker(coord, workerArn, "twin", beat))
	require.NoError(t, err)
	_, err = c.UpdateItem(ctx, claim("c", "b"))
	assert.True(t, conditionFailed(err), "a claim of a fenced item: got %v", err)
	_, err = c.UpdateItem(ctx, table.ClaimedFrom(table.RejoinWorker(coord, workerArn, "twin", "c", true, now), "a"))
	assert.True(t, conditionFailed(err), "a claiming rejoin on a stale read: got %v", err)
	out, err := c.UpdateItem(ctx, table.ClaimedFrom(table.RejoinWorker(coord, workerArn, "twin", "c", true, now), "b"))
	require.NoError(t, err)
	w := table.DecodeWorker(out.Attributes)
	assert.Equal(t, "c", w.Incarnation)
	assert.False(t, w.Fenced)
}

// A rejoin made on the fence its sender read (RejoinedFrom) lifts that
// fence only: sent on one fence and landing after a rejoin and a later
// fence, it is refused and the later fence stands (session 19's review
// of HB6, R2). On an item read as gone it re-creates the item only while
// there is none.
func TestWorker_ARejoinLiftsOnlyTheFenceItsSenderRead(t *testing.T) {
	ctx, c, coord := workerTable(t)
	now := time.Now()
	key := table.Key(aggregates.WorkerKey(workerArn, "solo"))
	read := func() map[string]types.AttributeValue {
		out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord), Key: key, ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		if len(out.Item) == 0 {
			return nil
		}
		return out.Item
	}
	rejoin := func(item map[string]types.AttributeValue) *dynamodb.UpdateItemInput {
		return table.RejoinedFrom(table.RejoinWorker(coord, workerArn, "solo", "a", false, now), item)
	}
	// Gone: a rejoin on the read "no item" lands once, not on an item.
	lateOnGone := rejoin(nil)
	_, err := c.UpdateItem(ctx, rejoin(nil))
	require.NoError(t, err)
	_, err = c.UpdateItem(ctx, lateOnGone)
	assert.True(t, conditionFailed(err), "a rejoin on an item read as gone, landing on one: got %v", err)

	fence := func() {
		w := table.DecodeWorker(read())
		_, err := c.UpdateItem(ctx, table.FenceWorker(coord, workerArn, "solo", w.Beat))
		require.NoError(t, err)
	}
	fence()
	late := rejoin(read()) // R1: its answer lost, it lands last
	_, err = c.UpdateItem(ctx, rejoin(read()))
	require.NoError(t, err, "R2, on the same fence")
	_, err = c.UpdateItem(ctx, table.HeartbeatWorkerAgain(coord, workerArn, "solo", "a", 1, now))
	require.NoError(t, err)
	fence() // a later taker's
	_, err = c.UpdateItem(ctx, late)
	assert.True(t, conditionFailed(err), "a late rejoin on an earlier fence: got %v", err)
	assert.True(t, table.DecodeWorker(read()).Fenced, "the later fence was lifted")
	_, err = c.UpdateItem(ctx, table.HeartbeatWorkerAgain(coord, workerArn, "solo", "a", 1, now))
	assert.True(t, conditionFailed(err), "a heartbeat after the later fence: got %v", err)
}

// A heartbeat that counts the offers its poller took removes them in the
// same write (table.OffersCounted; docs/exactly-once.md, "The givers'
// overshoot (session 23)"): the offers not taken stay, an offer the item
// no longer holds (removed by an earlier attempt whose answer was lost) is
// no error, and neither is an item without offers.
func TestWorker_AHeartbeatRemovesTheOffersItsCountIncludes(t *testing.T) {
	ctx, c, coord := workerTable(t)
	now := time.Now()
	_, err := c.UpdateItem(ctx, table.HeartbeatWorker(coord, workerArn, "r", "inc-r", 0, true, now))
	require.NoError(t, err)
	for _, s := range []string{"s1", "s2", "s3"} {
		_, err := c.UpdateItem(ctx, table.OfferLease(coord, workerArn, "r", s))
		require.NoError(t, err)
	}
	out, err := c.UpdateItem(ctx, table.OffersCounted(table.HeartbeatWorkerAgain(coord, workerArn, "r", "inc-r", 2, now), []string{"s1", "s2"}))
	require.NoError(t, err)
	w := table.DecodeWorker(out.Attributes)
	assert.Equal(t, 2, w.Held)
	assert.Equal(t, []string{"s3"}, w.Offers, "the offers not taken stay")
	out, err = c.UpdateItem(ctx, table.OffersCounted(table.HeartbeatWorkerAgain(coord, workerArn, "r", "inc-r", 3, now), []string{"s1", "s3"}))
	require.NoError(t, err, "an offer already removed is no error")
	w = table.DecodeWorker(out.Attributes)
	assert.Empty(t, w.Offers)
	_, err = c.UpdateItem(ctx, table.OffersCounted(table.RenewWorkerAgain(coord, workerArn, "r", "inc-r", 3, now), []string{"s3"}))
	require.NoError(t, err, "an item without offers is no error")
	in := table.HeartbeatWorkerAgain(coord, workerArn, "r", "inc-r", 3, now)
	assert.Equal(t, aws.ToString(in.UpdateExpression), aws.ToString(table.OffersCounted(in, nil).UpdateExpression), "nothing taken: the heartbeat as before")
}
