package poller_test

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
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
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// Review (adversarial, session 19) of HB6 as built: docs/exactly-once.md,
// "Review (adversarial, session 19): HB6 as built".

// isClaim reports whether in is a write of the worker item sk that claims
// it: it sets the incarnation without being conditional on it being the
// writer's already (a heartbeat poller's first heartbeat, a renewing
// poller's first worker write, a claiming rejoin).
func isClaim(in *dynamodb.UpdateItemInput, sk string) bool {
	k, ok := in.Key[table.AttrSK].(*ddbtypes.AttributeValueMemberS)
	if !ok || k.Value != sk || in.ExpressionAttributeNames["#inc"] != table.AttrWorkerIncarnation {
		return false
	}
	return !strings.Contains(aws.ToString(in.ConditionExpression), "#inc = :inc")
}

// lateClaims orders the worker writes of two processes given one owner
// name: the older one's first claim is held (its caller sees an error, as
// for a request whose answer timed out) and lands later, right after the
// newer one's first claim landed; the older one's other worker writes
// wait meanwhile, so that none is evaluated between the two claims.
type lateClaims struct {
	inner *dynamodb.Client
	sk    string

	gate     sync.RWMutex // the older one's worker writes (R), the newer one's claim and the replay (W)
	mu       sync.Mutex
	held     *dynamodb.UpdateItemInput
	newerRan bool
	replayed chan error // the held claim's outcome when it landed late
}

// older is the table as the process that started first sees it.
type lateOlder struct{ *lateClaims }

// newer is the table as the process that started second sees it.
type lateNewer struct{ *lateClaims }

func (o lateOlder) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return o.inner.Query(ctx, in, opts...)
}

func (o lateOlder) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	k, _ := in.Key[table.AttrSK].(*ddbtypes.AttributeValueMemberS)
	if k == nil || k.Value != o.sk {
		return o.inner.UpdateItem(ctx, in, opts...)
	}
	o.mu.Lock()
	if o.held == nil && isClaim(in, o.sk) {
		o.held = in
		o.mu.Unlock()
		return nil, &ddbtypes.InternalServerError{Message: aws.String("injected: the claim's answer timed out (the request lands later)")}
	}
	o.mu.Unlock()
	o.gate.RLock()
	defer o.gate.RUnlock()
	return o.inner.UpdateItem(ctx, in, opts...)
}

func (n lateNewer) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return n.inner.Query(ctx, in, opts...)
}

func (n lateNewer) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	n.mu.Lock()
	first := !n.newerRan && isClaim(in, n.sk)
	held := n.held
	if first {
		n.newerRan = true
	}
	n.mu.Unlock()
	if !first || held == nil {
		return n.inner.UpdateItem(ctx, in, opts...)
	}
	n.gate.Lock()
	defer n.gate.Unlock()
	out, err := n.inner.UpdateItem(ctx, in, opts...)
	// The older process's claim, sent before it was born, lands now.
	_, rerr := n.inner.UpdateItem(context.Background(), held)
	n.replayed <- rerr
	return out, err
}

// pollerOn is a poller of env e (its reads logged as tag) whose table (leases, worker item) is api;
// its commits go to the real table.
func pollerOn(t *testing.T, e *env, owner, tag string, api poller.Table, mutate func(*poller.Config)) *testPoller {
	t.Helper()
	tp := &testPoller{reg: prometheus.NewRegistry(), logs: &logSink{}}
	tp.pm = processor.NewMetrics(tp.reg)
	tp.m = poller.NewMetrics(tp.reg)
	proc, err := processor.New(e.ddb, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}, tp.pm)
	require.NoError(t, err)
	cfg := fastConfig(e.table, e.stream.arn, owner)
	cfg.Logger = slog.New(slog.NewJSONHandler(tp.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if mutate != nil {
		mutate(&cfg)
	}
	tp.Poller, err = poller.New(e.stream.client(tag), api, proc, cfg, tp.m)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", owner, tp.logs)
		}
	})
	return tp
}

// Hole R1 (HB6 as built): a claim sent before its process was born lands
// after the process was born (another attempt was answered) and after a
// newer process of the same name claimed the item. The claim is
// conditional on no fence only, so it takes the name back: the older
// process, which holds the shard, heartbeats on (its heartbeats are
// conditional on its incarnation, which the item names again), and the
// newer one is refused and stops with OwnerInUseError: the wrong one
// stops, and claim H6's premise ("every write X makes after L that would
// extend its validity is refused"; "a claim it could still make is only a
// not-yet-born X's, whose leases are none") is false. A claim must be
// conditional on the item as its sender last read it (the incarnation it
// names), so that a claim landing after another process's is refused.
func TestReviewS19HB6_ALateClaimOfABornProcessDoesNotTakeTheNameBack(t *testing.T) {
	for _, mode := range []poller.LeaseMode{poller.LeaseModeHeartbeat, poller.LeaseModeRenew} {
		t.Run(string(mode), func(t *testing.T) { lateClaimOfABornProcess(t, mode) })
	}
}

func lateClaimOfABornProcess(t *testing.T, mode poller.LeaseMode) {
	e := newEnv(t, 1901)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 20)...)
	lc := &lateClaims{inner: e.ddb, sk: aggregates.WorkerKey(f.arn, "twin").SK, replayed: make(chan error, 1)}
	setMode := func(c *poller.Config) { c.LeaseMode = mode }
	a := pollerOn(t, e, "twin", "a", lateOlder{lc}, setMode)
	b := pollerOn(t, e, "twin", "b", lateNewer{lc}, setMode)

	actx, acancel := context.WithCancel(context.Background())
	defer acancel()
	aDone := make(chan error, 1)
	go func() { aDone <- a.Run(actx) }()
	eventually(t, "a holds the lease (its first claim held, a later one answered)", 30*time.Second, func() bool {
		return counter(t, a.m.LeasesHeld) == 1
	})
	lc.mu.Lock()
	require.NotNil(t, lc.held, "the older process's first claim was not held")
	lc.mu.Unlock()

	bctx, bcancel := context.WithCancel(context.Background())
	defer bcancel()
	bDone := make(chan error, 1)
	go func() { bDone <- b.Run(bctx) }()
	select {
	case err := <-lc.replayed:
		t.Logf("the older process's late claim: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the newer process made no claim within a minute")
	}

	// The process that claimed first and holds the shard stops; the one
	// that claimed last keeps the name and takes the shard after it.
	var aErr error
	select {
	case aErr = <-aDone:
	case err := <-bDone:
		acancel()
		<-aDone
		t.Fatalf("the newer process stopped (%v); the older one, whose claim was sent before it was born and landed after the newer one's claim, kept the name", err)
	case <-time.After(time.Minute):
		acancel()
		<-aDone
		t.Fatal("the older process did not stop within a minute of the newer one's claim")
	}
	require.ErrorIs(t, aErr, poller.ErrOwnerInUse)
	var inUse *poller.OwnerInUseError
	require.ErrorAs(t, aErr, &inUse)
	assert.Equal(t, b.Incarnation(), inUse.Theirs)
	eventually(t, "b holds the lease", time.Minute, func() bool { return counter(t, b.m.LeasesHeld) == 1 })
	f.appendTo("shardId-A", e.write(t, 4)...)
	eventually(t, "b reads the shard", 30*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, r := range f.reads {
			if r.owner == "b" && r.at.After(time.Now().Add(-time.Second)) {
				return true
			}
		}
		return false
	})
	bcancel()
	select {
	case err := <-bDone:
		require.NoError(t, err, "the newer process")
	case <-time.After(2 * time.Minute):
		t.Fatal("the newer process did not stop within 2m")
	}
	e.drain(t, "finisher", nil)
	e.requireReconciled(t)
}

// lateRejoin is a heartbeat poller's table with its first rejoin held
// (its caller sees an error, as for a request whose answer timed out; the
// test applies it later: replay) and its other worker writes failing
// without landing while mute is set (a heartbeat path that answers
// nothing: a throttled worker partition, a network path down).
type lateRejoin struct {
	*dynamodb.Client
	sk   string
	mute atomic.Bool
	mu   sync.Mutex
	held *dynamodb.UpdateItemInput
}

func (l *lateRejoin) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if k, ok := in.Key[table.AttrSK].(*ddbtypes.AttributeValueMemberS); ok && k.Value == l.sk {
		l.mu.Lock()
		if l.held == nil && strings.Contains(aws.ToString(in.UpdateExpression), "REMOVE #l, #f, #as") {
			l.held = in
			l.mu.Unlock()
			return nil, &ddbtypes.InternalServerError{Message: aws.String("injected: the rejoin's answer timed out (the request lands later)")}
		}
		l.mu.Unlock()
		if l.mute.Load() {
			return nil, &ddbtypes.InternalServerError{Message: aws.String("injected: the worker write did not land")}
		}
	}
	return l.Client.UpdateItem(ctx, in, opts...)
}

// Hole R2: a rejoin that lands late removes a later fence. The rejoin
// clears fencedBeat on condition of the incarnation only (before HB6:
// unconditionally). A poller fenced once rejoins; its first rejoin's
// answer is lost, a second one lands, and it reads again. Later its
// heartbeats stop landing for two lease durations: another poller fences
// it and takes its leases over (H1). The first rejoin lands now: the
// fence is gone, the fenced poller's next heartbeat (conditional on no
// fence and its incarnation) lands, its pause ends, and it reads the
// shards the other took, beside it (its registry reads kept coming within
// a lease duration of each other, so verifyHeld never ran). A rejoin must
// be conditional on the fence it answers (fencedBeat as its re-read saw
// it, or the item gone).
func TestReviewS19HB6_ALateRejoinDoesNotLiftALaterFence(t *testing.T) {
	ddbtest.Long(t)
	e := newEnv(t, 1902)
	f := e.stream
	f.addShard("shardId-A", "")
	f.addShard("shardId-B", "")
	f.appendTo("shardId-A", e.write(t, 10)...)
	f.appendTo("shardId-B", e.write(t, 10)...)
	coord := table.CoordinationTableName(e.table)
	api := &lateRejoin{Client: e.ddb, sk: aggregates.WorkerKey(f.arn, "alpha").SK}
	a := pollerOn(t, e, "alpha", "a", api, nil)
	stopA := start(t, a)
	eventually(t, "a holds both leases", 30*time.Second, func() bool { return counter(t, a.m.LeasesHeld) == 2 })

	// A third party fences a (as a taker would): a drops every lease and
	// rejoins; its first rejoin is held, a later one lands.
	ctx := context.Background()
	eventually(t, "a fenced", 30*time.Second, func() bool {
		ws, err := table.ReadWorkers(ctx, e.ddb, coord, f.arn)
		require.NoError(t, err)
		for _, w := range ws {
			if w.Owner == "alpha" {
				_, err := e.ddb.UpdateItem(ctx, table.FenceWorker(coord, f.arn, "alpha", w.Beat))
				return err == nil
			}
		}
		return false
	})
	eventually(t, "a rejoined (its first rejoin held) and holds both leases again", 30*time.Second, func() bool {
		api.mu.Lock()
		held := api.held != nil
		api.mu.Unlock()
		return held && counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeaseRejoined)) >= 1 && counter(t, a.m.LeasesHeld) == 2
	})

	// c joins and gets its share by hand-over.
	c := pollerOn(t, e, "gamma", "c", e.ddb, nil)
	stopC := start(t, c)
	eventually(t, "c holds its share", 30*time.Second, func() bool {
		return counter(t, c.m.LeasesHeld) == 1 && counter(t, a.m.LeasesHeld) == 1
	})

	// a's heartbeats stop landing: c fences a and takes its lease over.
	api.mute.Store(true)
	eventually(t, "c takes a's lease over", time.Minute, func() bool { return counter(t, c.m.LeasesHeld) == 2 })
	// a's first rejoin lands now, then a's heartbeats land again.
	api.mu.Lock()
	_, rerr := e.ddb.UpdateItem(ctx, api.held)
	api.mu.Unlock()
	t.Logf("the late rejoin: %v", rerr)
	api.mute.Store(false)
	from := time.Now()
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); {
		f.appendTo("shardId-A", e.write(t, 1)...)
		f.appendTo("shardId-B", e.write(t, 1)...)
		time.Sleep(200 * time.Millisecond)
	}
	f.mu.Lock()
	var reads []fakeRead
	for _, r := range f.reads {
		if r.at.After(from) {
			reads = append(reads, r)
		}
	}
	f.mu.Unlock()
	stopC()
	stopA()
	// Each poller's reads of a shard, in runs with no gap over a second
	// (a reader polls every few tens of milliseconds): two owners' runs
	// of one shard must not overlap (a hand-over is one run ending before
	// the other's starts).
	requireNoOverlap(t, readRuns(reads, time.Second))
	e.drain(t, "finisher", nil)
	e.requireReconciled(t)
}

// readRuns groups reads by shard and owner into intervals, a gap over gap
// between two reads starting a new one.
func readRuns(reads []fakeRead, gap time.Duration) []interval {
	sort.Slice(reads, func(i, j int) bool { return reads[i].at.Before(reads[j].at) })
	open := map[string]*interval{}
	var out []interval
	for _, r := range reads {
		k := r.owner + "|" + r.shard
		if iv := open[k]; iv != nil && r.at.Sub(iv.to) <= gap {
			iv.to = r.at
			continue
		} else if iv != nil {
			out = append(out, *iv)
		}
		open[k] = &interval{owner: r.owner, shard: r.shard, from: r.at, to: r.at}
	}
	for _, iv := range open {
		out = append(out, *iv)
	}
	return out
}
