package main

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// emuShard is one shard of the emulated stream as the simulated mapping
// follows it: what it has read of it (in order) and where its delivery
// stands. A window belongs to one shard and ends at the shard's end.
type emuShard struct {
	id, parent string
	iter       *string                      // the mapping's reader; nil before the first read
	recs       []events.DynamoDBEventRecord // read so far, in shard order
	ended      bool                         // closed and read to its end
	pos        int                          // records before pos were delivered in a final window
	// The open window, if any.
	open    bool
	state   map[string]string
	wpos    int // records before wpos were delivered in this window
	batches int // invocations left in the window
	start   time.Time
}

// done reports whether the shard is finished for the mapping: closed,
// read to its end and every record delivered in a window that ended.
func (sh *emuShard) done() bool { return sh.ended && !sh.open && sh.pos == len(sh.recs) }

// shardedESM plays the event source mapping over several shards of the
// emulated stream: it reads each shard in order, a child only once its
// parent is read to its end, and delivers a child's records only once its
// parent's are all delivered and the parent's last window ended, as the
// mapping does; invocations of the shards that may go on are interleaved
// at random, each shard's windows carrying their own state.
type shardedESM struct {
	*esm
	emu    *streamemu.Stream
	shards map[string]*emuShard
	order  []string // creation order
	past   [][]byte
	clock  time.Time
}

// read takes in what the emulation holds now: every shard whose parent
// has been read to its end (or is gone), in creation order, read to its
// current end.
func (m *shardedESM) read(ctx context.Context) {
	t := m.t
	require.NoError(t, m.emu.Sync(ctx))
	for _, info := range m.emu.Shards() {
		sh := m.shards[info.ID]
		if sh == nil {
			sh = &emuShard{id: info.ID, parent: info.Parent}
			m.shards[info.ID] = sh
			m.order = append(m.order, info.ID)
		}
		if p := m.shards[sh.parent]; sh.ended || p != nil && !p.ended {
			continue
		}
		if sh.iter == nil {
			it, err := m.emu.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(m.arn), ShardId: aws.String(sh.id),
				ShardIteratorType: st.ShardIteratorTypeTrimHorizon})
			require.NoError(t, err)
			sh.iter = it.ShardIterator
		}
		for {
			out, err := m.emu.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: sh.iter})
			var throttled *st.LimitExceededException
			if errors.As(err, &throttled) {
				m.stats["mapping_throttled"]++
				time.Sleep(200 * time.Millisecond) // the shard's rate: the mapping backs off
				continue
			}
			require.NoError(t, err)
			for _, r := range out.Records {
				ev, err := processor.ToLambda(processor.FromStream(r, m.arn))
				require.NoError(t, err)
				sh.recs = append(sh.recs, ev)
			}
			if out.NextShardIterator == nil {
				sh.ended = true
				break
			}
			sh.iter = out.NextShardIterator
			if len(out.Records) == 0 {
				break
			}
		}
	}
}

// ready returns the shards with something to deliver whose parent is done
// (or not in the stream any more).
func (m *shardedESM) ready() []*emuShard {
	var out []*emuShard
	for _, id := range m.order {
		sh := m.shards[id]
		if p := m.shards[sh.parent]; p != nil && !p.done() {
			continue
		}
		if sh.open || sh.pos < len(sh.recs) {
			out = append(out, sh)
		}
	}
	return out
}

// deliver delivers everything read so far, interleaving the ready shards'
// invocations one at a time until every shard's records are delivered in
// windows that ended.
func (m *shardedESM) deliver() {
	for steps := 0; ; steps++ {
		require.Less(m.t, steps, 20_000, "delivery does not progress")
		ready := m.ready()
		if len(ready) == 0 {
			return
		}
		m.step(ready[m.rng.IntN(len(ready))])
	}
}

// step is one invocation of shard sh's window (opening one if none is
// open): a batch of its records after the window's last, the window's
// state, and final when the window's invocations are spent or the records
// read so far are (a window ends at the shard's end). A failed or killed
// invocation is retried with the same records and state; now and then an
// earlier invocation is delivered again, or the window is started over
// with a fresh state (the mapping lost it).
func (m *shardedESM) step(sh *emuShard) {
	e := m.esm
	if !sh.open {
		m.clock = m.clock.Add(time.Minute)
		sh.open, sh.state, sh.wpos, sh.batches, sh.start = true, map[string]string{}, sh.pos, 1+e.rng.IntN(5), m.clock
	}
	if len(m.past) > 0 && e.rng.IntN(100) < 5 {
		e.call(m.past[e.rng.IntN(len(m.past))], -1)
		e.stats["duplicate_delivery"]++
	}
	sh.batches--
	final := sh.batches == 0
	size := batchSize(e.rng)
	if final && e.rng.IntN(4) == 0 {
		size = 0 // the final invocation often comes without records
	}
	end := min(sh.wpos+size, len(sh.recs))
	if end == len(sh.recs) {
		final = true
		if sh.ended {
			e.stats["window_at_shard_end"]++
		}
	}
	e.shard = sh.id
	payload := e.windowEvent(sh.recs[sh.wpos:end], sh.state, sh.start, final)
	m.past = append(m.past, payload)
	a := e.call(payload, e.chaos())
	for tries := 0; !a.ok; tries++ {
		require.Less(e.t, tries, 20, "invocation keeps failing: %s", a.body)
		if a.killed {
			e.stats["redelivered_after_kill"]++
		} else {
			e.stats["batch_error"]++
			// The mapping backs off before a retry; a read throttled at
			// the shard's rate then finds the rate refilled.
			time.Sleep(50 * time.Millisecond)
		}
		a = e.call(payload, -1) // the same records and state
	}
	var resp events.DynamoDBTimeWindowEventResponse
	require.NoError(e.t, json.Unmarshal(a.body, &resp), "%s", a.body)
	require.NotNil(e.t, resp.State, "a tumbling answer carries a state: %s", a.body)
	require.Empty(e.t, resp.BatchItemFailures)
	sh.state, sh.wpos = resp.State, end
	switch {
	case final:
		require.Empty(e.t, sh.state, "the final invocation commits the window")
		sh.open, sh.pos = false, end
		e.stats["window"]++
	case e.rng.IntN(100) < 4:
		sh.open = false // started over from the window's first record
		e.stats["window_restarted"]++
	}
}

// requestCounter counts the requests a handler serves.
type requestCounter struct {
	next http.Handler
	n    atomic.Int64
}

func (c *requestCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.n.Add(1)
	c.next.ServeHTTP(w, r)
}

// testTumblingShards runs the tumbling-window function on the emulation of
// an AWS stream (internal/streamemu) served over HTTP: the function's
// Streams client reads it there (AWS_ENDPOINT_URL_DYNAMODB_STREAMS), while
// a randomized workload is written in rounds and the emulated shards roll
// and split under it (the function's own writes come back through the
// stream and move the schedule too). The mapping delivers every shard in
// windows, parents before children, interleaved, with kills and DynamoDB
// failures. Then the reports equal the fold of the table, every shard
// holding transactions has its own checkpoint at or past its last
// transaction record, and no child was read before its parent's end.
func testTumblingShards(t *testing.T, bin string, seed uint64) {
	ctx := context.Background()
	table := newTable(t)
	s := newStream(t, table)
	emu, err := streamemu.New(poller.NewStreamsClient(ddbtest.Config(t)), streamemu.Config{
		StreamARN: s.arn, Shards: 3, RollRecords: 60, SplitRatio: 0.4, MaxOpenShards: 8, Seed: seed,
		// AWS's call rates: the function's reads of its shard are
		// throttled as on AWS, and retried. (Not the two-reader rule: the
		// emulation counts iterator chains, and the mapping, the
		// function's current commit and its previous one, idle for less
		// than a second, would be three.)
		Limits: streamemu.Limits{DescribeStreamPerSecond: streamemu.AWSLimits.DescribeStreamPerSecond,
			GetRecordsPerShardPerSecond: streamemu.AWSLimits.GetRecordsPerShardPerSecond},
	})
	require.NoError(t, err)
	front := &requestCounter{next: streamemu.Handler(emu)}
	srv := httptest.NewServer(front)
	t.Cleanup(srv.Close)

	proxy := newFaultProxy(t, ddbtest.Endpoint(t))
	api := newRuntimeAPI(t)
	api.controlPlane.set(safeMapping("esm-1", "tumbling"))
	fn := newFunction(t, bin, api, lambdaEnv(api, proxy.srv.URL, table,
		"AWS_ENDPOINT_URL_DYNAMODB_STREAMS="+srv.URL,
		"LEDGER_LAMBDA_MODE=tumbling", "LEDGER_MAX_ITEMS_PER_RUN=12", "LEDGER_BATCH_RECORDS=100"))
	proxy.kill = fn.kill
	fn.start()
	m := &shardedESM{
		esm:    &esm{t: t, rng: rand.New(rand.NewPCG(seed, 23)), fn: fn, api: api, proxy: proxy, arn: s.arn, stats: map[string]int{}},
		emu:    emu,
		shards: map[string]*emuShard{},
		clock:  time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
	}

	w := ledgertest.NewWorkload(seed)
	// Rounds of writes, each followed by the mapping delivering what the
	// stream holds; then two rounds without writes, the first of which
	// delivers the last transactions (the second only the function's own
	// writes of the first).
	const rounds, steps = 6, 50
	for round := 0; round < rounds+2; round++ {
		if round < rounds {
			require.NoError(t, w.Run(ctx, s.ddb, table, steps))
		}
		m.read(ctx)
		m.deliver()
	}
	// Quiet when idle: the second round without writes delivered only the
	// function's own report writes, whose windows had no effect; their
	// final invocations moved the checkpoints in the coordination table,
	// which has no stream, so one more round finds no record and writes
	// none. (With the checkpoints in the ledger table, each such move was
	// the only record of the next window, forever.)
	require.NoError(t, emu.Sync(ctx))
	quiet := len(emu.History())
	m.read(ctx)
	m.deliver()
	require.NoError(t, emu.Sync(ctx))
	assert.Equal(t, quiet, len(emu.History()), "records written while the stream was idle")

	rs := s.requireReconciled(t)
	assert.Equal(t, w.Live(), rs.Transactions)
	assert.Empty(t, emu.EarlyReads(), "no child read before its parent's end")
	assert.Positive(t, front.n.Load(), "the function read the emulation through its front end")

	// Each shard's transactions are committed under its own checkpoint.
	_, cps, err := ledgertable.ReadStreamState(ctx, s.ddb, ledgertable.CoordinationTableName(table), s.arn, nil)
	require.NoError(t, err)
	lastTxn := map[string]string{}
	for _, e := range emu.History() {
		if pk, ok := e.Record.Dynamodb.Keys["PK"].(*st.AttributeValueMemberS); ok && aggregates.IsTransactionKey(pk.Value) {
			lastTxn[e.Shard] = e.Seq
		}
	}
	require.NotEmpty(t, lastTxn)
	for shard, seq := range lastTxn {
		cp, ok := cps[shard]
		if assert.True(t, ok, "shard %s holds transactions and has no checkpoint", shard) {
			assert.GreaterOrEqual(t, processor.CompareSequence(cp.Seq, seq), 0, "shard %s: checkpoint %s before its last transaction %s", shard, cp.Seq, seq)
		}
	}

	splits, rolls := 0, 0
	for _, info := range emu.Shards() {
		switch len(info.Children) {
		case 1:
			rolls++
		case 2:
			splits++
		}
	}
	assert.Positive(t, rolls, "shards rolled")
	assert.Positive(t, splits, "shards split")
	assert.Positive(t, m.stats["window_at_shard_end"], "windows ended at a shard's end")
	assert.Greater(t, fn.starts, 1, "processes killed and restarted")
	withTxns := make([]string, 0, len(lastTxn))
	for sh := range lastTxn {
		withTxns = append(withTxns, sh)
	}
	sort.Strings(withTxns)
	t.Logf("%d shards (%d rolls, %d splits), %d with transactions; %d live transactions; front end served %d requests (GetRecords throttled %d); delivery %v; %d processes",
		len(m.order), rolls, splits, len(withTxns), rs.Transactions, front.n.Load(), emu.Refused("GetRecords", "LimitExceededException"), m.stats, fn.starts)
}
