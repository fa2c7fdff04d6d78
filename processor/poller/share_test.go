package poller_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// countingTable counts the coordinator's reads (Query calls and the items
// they return) and its worker heartbeats, in front of the real table.
type countingTable struct {
	poller.Table
	mu         sync.Mutex
	queries    int
	items      int
	heartbeats int
}

func (c *countingTable) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := c.Table.Query(ctx, in, opts...)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queries++
	if err == nil {
		c.items += len(out.Items)
	}
	return out, err
}

func (c *countingTable) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.mu.Lock()
	if pk, _ := table.String(in.Key, table.AttrPK); strings.HasSuffix(pk, "#WORKERS") && strings.Contains(aws.ToString(in.UpdateExpression), "ADD") {
		c.heartbeats++
	}
	c.mu.Unlock()
	return c.Table.UpdateItem(ctx, in, opts...)
}

func (c *countingTable) read() (queries, items, heartbeats int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queries, c.items, c.heartbeats
}

// countedPoller is e.poller with its coordinator's table calls counted.
func (e *env) countedPoller(t *testing.T, owner string, api *countingTable, mutate func(*poller.Config)) *testPoller {
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
	tp.Poller, err = poller.New(e.stream.client(owner), api, proc, cfg, tp.m)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", owner, tp.logs)
		}
	})
	return tp
}

// finishedShard writes what the fleet leaves of a shard read to its end: a
// finished checkpoint and a released lease marked finished.
func (e *env) finishedShard(t *testing.T, id string) {
	t.Helper()
	ctx, coord, now := context.Background(), table.CoordinationTableName(e.table), time.Now()
	k := aggregates.CheckpointKey(e.stream.arn, id)
	_, err := e.ddb.UpdateItem(ctx, table.AdvanceCheckpoint(coord, k, id, "", "", true, now))
	require.NoError(t, err)
	_, err = e.ddb.UpdateItem(ctx, table.TakeLease(coord, e.stream.arn, table.Lease{Shard: id}, "gone", "", time.Second, now))
	require.NoError(t, err)
	_, err = e.ddb.UpdateItem(ctx, table.ReleaseLease(coord, e.stream.arn, table.Lease{Shard: id, Owner: "gone", Counter: 1}, "", true, now))
	require.NoError(t, err)
}

// A live poller's round reads what its share needs, not the stream's
// coordination state: on a stream of 4 open shards and 120 closed ones
// already read to their end, a poller holding the 4 reads, per round, its
// worker registry, one page of the lease sweep and nothing per finished
// shard. Before (every pass Queried the lease partition and the 16
// checkpoint partitions) a pass read about 250 items here, at every
// renewal and at every reader's end.
func TestPoller_ARoundReadsWhatItsShareNeedsNotTheStream(t *testing.T) {
	e := newEnv(t, 31)
	const done, page = 120, 10
	open := []string{"shardId-open-0", "shardId-open-1", "shardId-open-2", "shardId-open-3"}
	for i := range done {
		id := fmt.Sprintf("shardId-done-%03d", i)
		e.stream.addShard(id, "")
		e.stream.close(id)
		e.finishedShard(t, id)
	}
	for _, s := range open {
		e.stream.addShard(s, "")
	}
	e.stream.split(open, e.write(t, 100))
	api := &countingTable{Table: e.ddb}
	p := e.countedPoller(t, "A", api, func(c *poller.Config) { c.LeaseScanPage = page })
	stop := start(t, p)
	eventually(t, "A holds the open shards", 15*time.Second, func() bool { return counter(t, p.m.LeasesHeld) == float64(len(open)) })
	eventually(t, "A committed the records", 15*time.Second, func() bool { return recordsTotal(t, p.pm, processor.OutcomeApplied) > 0 })
	q0, i0, h0 := api.read()
	time.Sleep(5 * time.Second) // about five rounds at 3 s leases
	q1, i1, h1 := api.read()
	rounds := h1 - h0
	items, queries := i1-i0, q1-q0
	t.Logf("%d rounds: %d Queries, %d items read (%d shards in the stream, %d held)", rounds, queries, items, done+len(open), len(open))
	require.Positive(t, rounds, "the poller heartbeats in the worker registry at each round")
	// Per round: the registry (1 item), a page of the sweep, and at most a
	// checkpoint and a lease per shard held (decisions on taking).
	perRound := 1 + page + 2*len(open)
	assert.LessOrEqual(t, items, (rounds+1)*perRound, "items read per round grow with the share and the sweep's page, not with the stream")
	assert.Less(t, items, (rounds+1)*(done+len(open))/2, "a round reads a fraction of the stream's leases")
	assert.Equal(t, float64(len(open)), counter(t, p.m.LeasesHeld), "no finished shard is taken")
	stop()
	e.drain(t, "D", nil)
	e.requireReconciled(t)
}

// balanced reports whether every poller in ps holds its fair share of n
// shards within ±10% (and at least floor, at most ceil of n/len(ps)).
func balanced(t *testing.T, n int, ps ...*testPoller) bool {
	lo, hi := n/len(ps), (n+len(ps)-1)/len(ps)
	for _, p := range ps {
		h := int(counter(t, p.m.LeasesHeld))
		fair := float64(n) / float64(len(ps))
		if h < lo || h > hi || float64(h) < 0.9*fair || float64(h) > 1.1*fair {
			return false
		}
	}
	return true
}

// On the emulation of AWS's stream, with 24 open shards: three pollers
// starting together each take their share (none takes everything first: a
// poller waits for a second read of the worker registry before taking), a
// fourth joining gets its share handed over, and one leaving hands its
// leases over to the others — every poller within its fair share ±10%;
// then exact and in order. How long each took against two lease durations
// (issue 23's target) is logged as a figure (a loaded machine stretches
// it; the fleet benchmark measures it); the join's and the leave's are
// asserted within 10 lease durations, a bound that holds on a loaded
// machine, and the waits themselves are bounded at 50 so that a fleet
// that never balances fails with its figure.
func TestPoller_EmulatedFleetBalancesWithinTwoLeaseDurationsOfAStartAJoinAndALeave(t *testing.T) {
	ddbtest.Long(t)
	const shards = 24
	const lease = 6 * time.Second // long enough that no renewal misses on a loaded machine
	e := newEmuEnv(t, 331, streamemu.Config{Shards: shards, Seed: 331})
	cfg := func(c *poller.Config) { c.LeaseDuration = lease }
	a, b, c := e.poller(t, "a", nil, cfg), e.poller(t, "b", nil, cfg), e.poller(t, "c", nil, cfg)
	e.write(t, 60)
	stopA := start(t, a)
	stopB, stopC := start(t, b), start(t, c)
	balance := func(what string, ps ...*testPoller) time.Duration {
		t.Helper()
		from := time.Now()
		// 50 lease durations (5 minutes): 15 failed after a join at load
		// 8 beside a CI run, the joiner's heartbeats late (paused).
		eventually(t, what, 50*lease, func() bool { return balanced(t, shards, ps...) })
		took := time.Since(from)
		within := "within"
		if took > 2*lease {
			within = "NOT within"
		}
		t.Logf("%s: %s, %s two lease durations (%s; %.1f lease durations)", what, took.Round(10*time.Millisecond), within, 2*lease, float64(took)/float64(lease))
		return took
	}
	balance("three pollers within their share after the start", a, b, c)
	// Whether one took more than its share first and handed the rest over
	// is a figure: a poller takes nothing before its second read of the
	// registry, a second after its first, and on a loaded machine the
	// others' first worker items can land later than that (it happened
	// here at load 20: 2 and 3 leases handed over, balanced in 33 s).
	for i, p := range []*testPoller{a, b, c} {
		if n := counter(t, p.m.LeaseEvents.WithLabelValues(poller.LeaseHandedOff)); n > 0 {
			t.Logf("%s took more than its share at the start: handed %v leases over", "abc"[i:i+1], n)
		}
	}
	e.write(t, 60)
	d := e.poller(t, "d", nil, cfg)
	stopD := start(t, d)
	joined := balance("four pollers within their share after a join", a, b, c, d)
	assert.LessOrEqual(t, joined, 10*lease, "the join balanced within 10 lease durations")
	e.write(t, 60)
	handed := counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeaseHandedOff))
	stopA()
	// How the leaver's leases went (handed over; expired and taken over,
	// which a loaded machine causes by delaying renewals) is a figure.
	t.Logf("the leaver handed %v leases over (its share: %d)", counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeaseHandedOff))-handed, shards/4)
	left := balance("three pollers within their share after a leave", b, c, d)
	assert.LessOrEqual(t, left, 10*lease, "the leave balanced within 10 lease durations")
	for _, p := range []*testPoller{b, c, d} {
		if n := counter(t, p.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver)); n > 0 {
			t.Logf("a poller took over %v expired leases", n)
		}
	}
	e.write(t, 60)
	stopB()
	stopC()
	stopD()
	e.finish(t, nil)
}
