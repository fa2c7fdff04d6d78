package poller_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// heldBack holds a poller's heartbeats (the writes of its worker item that
// add to its beat) while closed, in front of the real table: each waits
// until the gate opens (or its context ends). The poller's other writes,
// its offers' clears among them, go through.
type heldBack struct {
	poller.Table
	mu     sync.Mutex
	closed chan struct{} // nil: open
	beats  atomic.Int64  // heartbeats that landed
}

func (h *heldBack) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	pk, _ := table.String(in.Key, table.AttrPK)
	beat := strings.HasSuffix(pk, "#WORKERS") && strings.Contains(aws.ToString(in.UpdateExpression), "ADD #b")
	if beat {
		h.mu.Lock()
		gate := h.closed
		h.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	out, err := h.Table.UpdateItem(ctx, in, opts...)
	if beat && err == nil {
		h.beats.Add(1)
	}
	return out, err
}

func (h *heldBack) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = make(chan struct{})
}

func (h *heldBack) open() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed != nil {
		close(h.closed)
		h.closed = nil
	}
}

// heldBackPoller is e.poller whose coordinator writes through gate.
func (e *env) heldBackPoller(t *testing.T, owner string, gate *heldBack, streams poller.Streams, mutate func(*poller.Config)) *testPoller {
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
	tp.Poller, err = poller.New(streams, gate, proc, cfg, tp.m)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", owner, tp.logs)
		}
	})
	return tp
}

// The givers' overshoot of a joiner (session 23; BENCHMARKS.md, "Session
// 22: with a day of history, the joiner takes its share before its
// listing — and can overshoot it"). Six pollers hold 8 of 48 shards each;
// two more, r and s, join (their share: 6 each), and take what they are
// handed at once (the offer watch), but their heartbeats — the writes that
// tell the others their counts — are held back for two of the givers'
// rounds. Before the fix each giver saw a joiner at its last heartbeat's
// count plus what it had handed it itself: the others' hand-overs were
// visible to nobody once the joiner took them (its offers cleared), while
// the givers' own counts had already dropped (they heartbeat after
// handing over), so a giver whose round came then saw the joiner under
// the floor and handed it more: past its ceiling of 6 (peaks of 9 and 9, 6
// and 9, 7 and 6 in three runs on the code before; 171 against a share of
// 138 in the fleet benchmark). With it, a
// joiner's taken offers stay in its worker item until the heartbeat that
// counts them, and a giver counts the joiner's offers and its own
// hand-overs in flight: every lease handed to a joiner is in every
// giver's view of it, and no joiner goes past its ceiling.
//
// A joiner's count is read from the lease items (the leases naming it:
// those it took and those handed to it and not taken yet) every 50 ms,
// while its heartbeat is held back and for two rounds after. Its listings
// of the whole stream are refused meanwhile, as a joiner's first listing
// of thousands of shards is paced for a minute: it takes what it is
// handed before, and gives nothing back until the listing completes
// (balance needs it).
func TestPoller_TheGiversDoNotOvershootAJoinerWhoseHeartbeatLags(t *testing.T) {
	const givers, each, joiners = 6, 8, 2
	const shards = givers * each
	const lease = 9 * time.Second // renewal interval 3 s; the hold, 6 s, stays under a lease duration
	e := newEnv(t, 2301)
	ids := make([]string, shards)
	for i := range ids {
		ids[i] = fmt.Sprintf("shardId-OS-%02d", i)
		e.stream.addShard(ids[i], "")
	}
	e.stream.split(ids, e.write(t, 60))
	cfg := func(c *poller.Config) { c.LeaseDuration = lease }
	var ps []*testPoller
	for i := range givers {
		p := e.poller(t, string(rune('a'+i)), nil, nil, cfg)
		start(t, p)
		ps = append(ps, p)
	}
	eventually(t, "the givers hold their share", 2*time.Minute, func() bool { return balanced(t, shards, ps...) })
	// Past six registry reads each (balance's floor is then that of the
	// leases held), as in a fleet that has run for a while.
	time.Sleep(6 * lease / 3)
	require.True(t, balanced(t, shards, ps...))

	type joiner struct {
		name    string
		p       *testPoller
		gate    *heldBack
		listing *unlistable
		stop    func()
		peak    int
		peakAt  time.Duration
	}
	var js []*joiner
	for _, name := range []string{"r", "s"}[:joiners] {
		j := &joiner{name: name, gate: &heldBack{Table: e.ddb}, listing: &unlistable{Streams: e.stream.client(name), shut: &atomic.Bool{}}}
		j.listing.shut.Store(true)
		j.p = e.heldBackPoller(t, name, j.gate, j.listing, cfg)
		js = append(js, j)
	}
	for _, j := range js {
		j.stop = start(t, j.p)
	}
	// The givers hand a joiner nothing before they saw its beat move: held
	// back from its third heartbeat.
	for _, j := range js {
		eventually(t, j.name+" heartbeats twice", time.Minute, func() bool { return j.gate.beats.Load() >= 2 })
		j.gate.close()
	}
	ceiling := (shards + givers + joiners - 1) / (givers + joiners) // 6
	coord := table.CoordinationTableName(e.table)
	from := time.Now()
	watch := func(d time.Duration) {
		for until := time.Now().Add(d); time.Now().Before(until); time.Sleep(50 * time.Millisecond) {
			ls, _, err := table.ReadLeasePage(context.Background(), e.ddb, coord, e.stream.arn, nil, 1000)
			require.NoError(t, err)
			named := map[string]int{}
			for _, l := range ls {
				named[l.Owner]++
			}
			for _, j := range js {
				if n := max(named[j.name], int(counter(t, j.p.m.LeasesHeld))); n > j.peak {
					j.peak, j.peakAt = n, time.Since(from)
				}
			}
		}
	}
	watch(2 * lease / 3) // two of each giver's rounds
	for _, j := range js {
		j.gate.open()
	}
	watch(2 * lease / 3)
	for _, j := range js {
		require.Positive(t, j.listing.pages.Load(), "%s's listing was never refused: the test proves less", j.name)
		j.listing.shut.Store(false)
		t.Logf("%s's peak: %d leases (%s after its heartbeat was held back), its ceiling %d; it holds %v at the end, handed back %v",
			j.name, j.peak, j.peakAt.Round(10*time.Millisecond), ceiling, counter(t, j.p.m.LeasesHeld), counter(t, j.p.m.LeaseEvents.WithLabelValues(poller.LeaseHandedOff)))
	}
	for _, j := range js {
		// A giver's round whose registry read came before it saw the other
		// joiner's beat move counts one worker fewer (ceiling 7): what it
		// hands is bounded by its own view's ceiling, which the log of the
		// hand-over names (seen on a loaded machine: f handed r its
		// seventh at share_ceiling 7, three seconds before it saw s).
		//
		// Plans read from registries sent apart differ (docs/exactly-once.md,
		// "The givers' overshoot (session 23)": what the argument does not
		// exclude): seen once in the full suite beside another at load 18,
		// e handed r two at 36.77 s, a two at 37.32 s, b, d and f one each
		// at 37.52 s, 7 against 6, each plan's own ceiling 6. One lease over
		// is allowed when more than one giver handed to the joiner; the
		// overshoot this pins, a hand-over in each round that fell in a gap,
		// reached 9.
		bound := ceiling
		handedBy := map[string]bool{}
		for _, g := range ps[:givers] {
			for _, l := range g.logs.lines() {
				if l["msg"] == "lease over the fair share; handing it over" && l["to"] == j.name {
					handedBy[fmt.Sprint(l["owner"])] = true
					if c, ok := l["share_ceiling"].(float64); ok && int(c) > bound {
						bound = int(c)
					}
				}
			}
		}
		if len(handedBy) > 1 {
			bound++
		}
		assert.LessOrEqual(t, j.peak, bound, "the givers together handed %s more than the ceiling of their views (%d with every joiner seen) and one", j.name, ceiling)
		ps = append(ps, j.p)
	}
	eventually(t, "every poller holds its share", 2*time.Minute, func() bool { return balanced(t, shards, ps...) })
	e.stream.split(ids, e.write(t, 40))
	for _, j := range js {
		j.stop()
	}
	e.drain(t, "D", nil)
	e.requireReconciled(t)
}
