package poller_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// Review, session 15 (hole 4), and of the heartbeat (HB6), fixed in
// session 19: two live pollers given one --owner. The lease protocol told
// pollers apart by the owner alone: the second took the first's lease for
// its own previous life's, both heartbeated one worker item (neither
// fenced), and both read the shard for good. Now each process has an
// incarnation: the second's first heartbeat claims the worker item, the
// first's next heartbeat is refused by it, and the first drops its leases
// and stops (Run returns an OwnerInUseError naming the owner); the second
// takes the lease once it stood unchanged for a lease duration after its
// claim, so the two never read the shard at once. Without the fix the
// first never stops (and both read the shard in the last 2 s).
// The older process keeps its leases by its heartbeat, or renews each
// lease item (--lease-mode renew: its worker write is conditional on its
// incarnation too, and the newer one takes a lease only once its counter
// stood still for a lease duration).
func TestPoller_TwoPollersGivenOneOwnerDoNotBothReadAShard(t *testing.T) {
	for _, mode := range []poller.LeaseMode{poller.LeaseModeHeartbeat, poller.LeaseModeRenew} {
		t.Run(string(mode), func(t *testing.T) { twoPollersGivenOneOwner(t, mode) })
	}
}

func twoPollersGivenOneOwner(t *testing.T, olderMode poller.LeaseMode) {
	e := newEnv(t, 1502)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 20)...)
	a := e.poller(t, "twin", f.client("a"), nil, func(c *poller.Config) { c.LeaseMode = olderMode })
	b := e.poller(t, "twin", f.client("b"), nil, nil)
	actx, acancel := context.WithCancel(context.Background())
	defer acancel()
	aDone := make(chan error, 1)
	go func() { aDone <- a.Run(actx) }()
	eventually(t, "a holds the lease", 20*time.Second, func() bool { return counter(t, a.m.LeasesHeld) == 1 })
	stopB := start(t, b)

	// a learns of b at its next heartbeat and stops: a liveness bound.
	var err error
	select {
	case err = <-aDone:
	case <-time.After(time.Minute):
		acancel()
		<-aDone
		t.Fatal("the first poller of the name did not stop within a minute of the second's start")
	}
	require.ErrorIs(t, err, poller.ErrOwnerInUse)
	var inUse *poller.OwnerInUseError
	require.ErrorAs(t, err, &inUse)
	assert.Equal(t, "twin", inUse.Owner)
	assert.Equal(t, a.Incarnation(), inUse.Mine)
	assert.Equal(t, b.Incarnation(), inUse.Theirs, "the newer process keeps the name")
	assert.Contains(t, err.Error(), `owner "twin"`)
	assert.Zero(t, counter(t, a.m.LeasesHeld), "the stopped poller holds nothing")

	// b takes the lease a dropped (after a lease duration) and reads on.
	eventually(t, "b holds the lease", time.Minute, func() bool { return counter(t, b.m.LeasesHeld) == 1 })
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); {
		f.appendTo("shardId-A", e.write(t, 2)...)
		time.Sleep(100 * time.Millisecond)
	}
	since := time.Now().Add(-2 * time.Second)
	readers := map[string]int{}
	var lastA, firstB time.Time
	f.mu.Lock()
	for _, r := range f.reads {
		if r.shard != "shardId-A" {
			continue
		}
		if r.at.After(since) {
			readers[r.owner]++
		}
		switch {
		case r.owner == "a" && r.at.After(lastA):
			lastA = r.at
		case r.owner == "b" && (firstB.IsZero() || r.at.Before(firstB)):
			firstB = r.at
		}
	}
	f.mu.Unlock()
	stopB()
	// What b had not read by its stop (the last writes) is read by a drain
	// of another name; the reports then equal the transactions: the
	// dropped leases lost nothing.
	e.drain(t, "finisher", nil)
	e.requireReconciled(t)
	assert.Equal(t, map[string]int{"b": readers["b"]}, readers, "readers of the shard over the last 2 s (GetRecords by poller)")
	assert.NotZero(t, readers["b"], "the newer poller reads the shard")
	require.False(t, firstB.IsZero(), "b never read the shard")
	assert.True(t, lastA.Before(firstB), "one reader at a time: a read the shard until %s, b from %s",
		lastA.Format("15:04:05.000"), firstB.Format("15:04:05.000"))
}

// A poller whose first heartbeat (its claim of the worker item) lands but
// whose answer is lost: the retry is a claim too, which no incarnation
// refuses, so the poller is not mistaken for another process of its name
// (it neither stops nor rejoins) and reads the shard. Fails with a claim
// conditional on the item being unclaimed (the retry refused by its own
// first attempt: the poller never counts itself registered and takes
// nothing).
func TestPoller_AFirstHeartbeatWhoseAnswerIsLostIsNotTakenForAnotherProcess(t *testing.T) {
	e := newEnv(t, 1503)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 20)...)
	var updates atomic.Int64
	api := faultClient(t, func(op string) ledgertest.Fault {
		if op == "UpdateItem" && updates.Add(1) == 1 {
			return ledgertest.LoseAnswer // the first heartbeat
		}
		return ledgertest.Pass
	})
	p := e.poller(t, "solo", nil, api, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	eventually(t, "the poller holds the lease", 30*time.Second, func() bool { return counter(t, p.m.LeasesHeld) == 1 })
	// Three lease durations of heartbeats after the lost one.
	for end := time.Now().Add(9 * time.Second); time.Now().Before(end); {
		f.appendTo("shardId-A", e.write(t, 2)...)
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "the poller took its own landed claim for another process's")
	case <-time.After(2 * time.Minute):
		t.Fatal("the poller did not stop within 2m")
	}
	e.drain(t, "finisher", nil) // the last writes, unread by the stop
	e.requireReconciled(t)
	lines := p.logs.lines()
	assert.Zero(t, logged(lines, "this poller's heartbeat was fenced"), "a lost answer is no fence")
	assert.Zero(t, counter(t, p.m.LeaseEvents.WithLabelValues(poller.LeaseRejoined)))
	assert.Zero(t, logged(lines, "another poller process uses this owner name"))
}

// A drain given the owner name of a live poller: it never writes a worker
// item, so the live poller's moving beat tells it another process uses
// its name, and it stops with an OwnerInUseError instead of taking that
// poller's leases for its own previous life's (which it did at once before
// incarnations: the live poller, reading none of its lease items, read on
// beside it, and after the drain's release beside whoever took the lease
// next). The live poller keeps its lease throughout.
func TestPoller_ADrainGivenALivePollersOwnerStopsAndTakesNothing(t *testing.T) {
	e := newEnv(t, 1504)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 20)...)
	live := e.poller(t, "twin", f.client("live"), nil, nil)
	stop := start(t, live)
	eventually(t, "the live poller holds the lease", 20*time.Second, func() bool { return counter(t, live.m.LeasesHeld) == 1 })
	d := e.poller(t, "twin", f.client("drain"), nil, func(c *poller.Config) { c.Drain = true })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := d.Run(ctx)
	require.NoError(t, ctx.Err(), "the drain did not stop")
	require.ErrorIs(t, err, poller.ErrOwnerInUse)
	assert.Zero(t, counter(t, d.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver)), "the drain took the live poller's lease over")
	assert.Zero(t, counter(t, d.m.LeaseEvents.WithLabelValues(poller.LeaseAcquired)))
	f.mu.Lock()
	for _, r := range f.reads {
		assert.NotEqual(t, "drain", r.owner, "the drain read %s", r.shard)
	}
	f.mu.Unlock()
	assert.Equal(t, 1.0, counter(t, live.m.LeasesHeld), "the live poller keeps its lease")
	assert.Zero(t, counter(t, live.m.LeaseEvents.WithLabelValues(poller.LeaseRejoined)), "the live poller was fenced")
	f.appendTo("shardId-A", e.write(t, 4)...)
	stop()
	e.drain(t, "finisher", nil) // what the live poller had not read yet
	e.requireReconciled(t)
}

// unansweredWorker is the poller's table with every write of its own
// worker item failing while mute is set (the request never lands), as
// for a process whose claims go unanswered.
type unansweredWorker struct {
	*dynamodb.Client
	sk   string
	mute atomic.Bool
}

func (u *unansweredWorker) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if sk, ok := in.Key[table.AttrSK].(*ddbtypes.AttributeValueMemberS); ok && sk.Value == u.sk && u.mute.Load() {
		return nil, &ddbtypes.InternalServerError{Message: aws.String("injected: the worker item's write did not land")}
	}
	return u.Client.UpdateItem(ctx, in, opts...)
}

// A live poller takes no lease before one of its claims of its worker
// item was answered (HB6, claim H6): a process whose claim lands late,
// after another process of its name claimed and took leases over, must
// bring none back into use. Its registry reads go on meanwhile (they made
// it take leases before the gate: a lease held, its reader waiting for a
// heartbeat). Once a claim is answered it takes the shard and reads it.
func TestPoller_APollerWhoseClaimIsNotAnsweredTakesNoLease(t *testing.T) {
	e := newEnv(t, 1505)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 20)...)
	api := &unansweredWorker{Client: e.ddb, sk: aggregates.WorkerKey(f.arn, "late").SK}
	api.mute.Store(true)
	tp := &testPoller{reg: prometheus.NewRegistry(), logs: &logSink{}}
	tp.pm = processor.NewMetrics(tp.reg)
	tp.m = poller.NewMetrics(tp.reg)
	proc, err := processor.New(e.ddb, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}, tp.pm)
	require.NoError(t, err)
	cfg := fastConfig(e.table, f.arn, "late")
	cfg.Logger = slog.New(slog.NewJSONHandler(tp.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tp.Poller, err = poller.New(f.client("late"), api, proc, cfg, tp.m)
	require.NoError(t, err)
	stop := start(t, tp)
	// Three rounds, each reading the registry (a take needs two reads),
	// with every claim failing.
	eventually(t, "three rounds of failed claims (registry reads go on)", time.Minute, func() bool {
		return logged(tp.logs.lines(), "writing the worker item (the heartbeat keeping this poller's leases) failed; retrying at the next round") >= 3
	})
	assert.Zero(t, counter(t, tp.m.LeasesHeld), "a poller not born holds a lease")
	assert.Zero(t, counter(t, tp.m.LeaseEvents.WithLabelValues(poller.LeaseAcquired)))
	api.mute.Store(false)
	eventually(t, "the lease taken once a claim is answered", 30*time.Second, func() bool { return counter(t, tp.m.LeasesHeld) == 1 })
	f.appendTo("shardId-A", e.write(t, 4)...)
	eventually(t, "the shard read", 30*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, r := range f.reads {
			if r.owner == "late" {
				return true
			}
		}
		return false
	})
	stop()
	e.drain(t, "finisher", nil)
	e.requireReconciled(t)
}
