package processor_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Adversarial review, session 18: "recheck before park" and parking in the
// consumers' commit (docs/exactly-once.md, "Tenant roll-ups", "Review
// (adversarial, session 18): recheck before park"). Each test names the
// hole it reproduces.

// whoKey tags the context of one of several consumers sharing a
// Processor (the poller's readers of several shards share one).
type whoKey struct{}

func who(ctx context.Context) string { s, _ := ctx.Value(whoKey{}).(string); return s }

// slowAnswerAPI is DynamoDB Local behind two faults, for consumers that
// share one Processor and its shape cache:
//
//   - the first read of report k by each consumer named in held is made
//     at once (it reads the item as it is then) and its answer is held
//     until release[name] is closed: a slow answer (a loaded host, a
//     goroutine not scheduled) that reaches the cache late; the held
//     consumers' transactions wait for sent, so that they change nothing
//     meanwhile;
//   - the first transaction of consumer "a" that sends k's count as a
//     condition meets another committer's commit of k right before it
//     (interfere: a consumer of another deployment of the fleet, with
//     its own cache): it is cancelled on its count condition.
type slowAnswerAPI struct {
	processor.DynamoDB
	t         *testing.T
	k         aggregates.Key
	interfere func(context.Context) error
	// read[name] is closed once the held read of name has been made;
	// arrived[name] when name's first transaction arrives (it waits for
	// sent).
	read, release, arrived map[string]chan struct{}
	sent                   chan struct{}
	// conflictAt, when set, is the transaction of "a" sending k's count
	// that is answered as AWS answers one that meets another holder of an
	// item (TransactionConflict, not forwarded), after the late answer of
	// conflictLate reached the cache.
	conflictAt   int
	conflictLate string

	mu       sync.Mutex
	readDone map[string]bool
	aCounts  int
	errs     []error
}

func newSlowAnswerAPI(t *testing.T, api processor.DynamoDB, k aggregates.Key, held ...string) *slowAnswerAPI {
	a := &slowAnswerAPI{DynamoDB: api, t: t, k: k, read: map[string]chan struct{}{}, release: map[string]chan struct{}{},
		arrived: map[string]chan struct{}{}, sent: make(chan struct{}), readDone: map[string]bool{}}
	for _, h := range held {
		a.read[h], a.release[h], a.arrived[h] = make(chan struct{}), make(chan struct{}), make(chan struct{})
	}
	return a
}

func (a *slowAnswerAPI) readsK(in *dynamodb.BatchGetItemInput) bool {
	for _, ka := range in.RequestItems {
		for _, key := range ka.Keys {
			if table.KeyOf(key) == a.k {
				return true
			}
		}
	}
	return false
}

func (a *slowAnswerAPI) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	name := who(ctx)
	release, held := a.release[name]
	a.mu.Lock()
	hold := held && !a.readDone[name] && a.readsK(in)
	if hold {
		a.readDone[name] = true
	}
	a.mu.Unlock()
	out, err := a.DynamoDB.BatchGetItem(ctx, in, opts...)
	if hold {
		close(a.read[name])
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	return out, err
}

func (a *slowAnswerAPI) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	name := who(ctx)
	if _, held := a.release[name]; held {
		a.mu.Lock()
		select {
		case <-a.arrived[name]:
		default:
			close(a.arrived[name])
		}
		a.mu.Unlock()
		select {
		case <-a.sent:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if name == "a" && (&countFlipAPI{k: a.k}).holdsCountCondition(in) {
		a.mu.Lock()
		a.aCounts++
		n := a.aCounts
		a.mu.Unlock()
		if n == 1 {
			if err := a.interfere(ctx); err != nil {
				a.mu.Lock()
				a.errs = append(a.errs, err)
				a.mu.Unlock()
			}
		}
		if n == a.conflictAt {
			close(a.release[a.conflictLate])
			<-a.arrived[a.conflictLate] // its late answer is in the cache
			return nil, a.conflict(in)
		}
	}
	return a.DynamoDB.TransactWriteItems(ctx, in, opts...)
}

// conflict is AWS's answer to a transaction that meets another holder of
// k: TransactionConflict at k's update, None elsewhere.
func (a *slowAnswerAPI) conflict(in *dynamodb.TransactWriteItemsInput) error {
	reasons := make([]ddbtypes.CancellationReason, len(in.TransactItems))
	for i, it := range in.TransactItems {
		code := "None"
		if it.Update != nil && table.KeyOf(it.Update.Key) == a.k {
			code = "TransactionConflict"
		}
		reasons[i] = ddbtypes.CancellationReason{Code: aws.String(code)}
	}
	return &ddbtypes.TransactionCanceledException{Message: aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons [TransactionConflict]"), CancellationReasons: reasons}
}

// lateShapes sets up the stale-shape sequences of S18-P1: one income of
// branch sp on 2026-11-27 committed (the daily report's count is 1), then
// one more for each of ids, their records returned by id; and an API in
// front of the table that holds the answers of held's report reads and,
// when asked to interfere, commits "b" by another committer (its own
// shape cache), moving the report's count.
func lateShapes(t *testing.T, e *env, ids []string, held ...string) (map[string]processor.Record, *slowAnswerAPI) {
	t.Helper()
	tx := func(id string) rtx { return rtx{"acme", "sp", "BRL", "2026-11-27", id, "INCOME", "10", "food"} }
	tx("0").put(t, e, "")
	first := newConsumer(t, e, "marker", nil, processor.Config{})
	first.pass() // the report's count is 1
	for _, id := range ids {
		tx(id).put(t, e, "")
	}
	_, all := e.records(t)
	recs := map[string]processor.Record{}
	for _, r := range all {
		if sk, ok := table.String(r.NewImage, "SK"); ok && strings.HasPrefix(sk, "2026-11-27#") && !first.delivered[r.EventID] {
			recs[strings.TrimPrefix(sk, "2026-11-27#")] = r
		}
	}
	require.Len(t, recs, len(ids))

	rk := aggregates.ReportKey{Tenant: "acme", Branch: "sp", Period: day("2026-11-27")}.Key()
	other := newConsumer(t, e, "marker", nil, processor.Config{}) // another committer, its own cache
	api := newSlowAnswerAPI(t, e.ddb, rk, held...)
	api.interfere = func(ctx context.Context) error {
		_, err := other.p.Process(context.WithoutCancel(ctx), other.g, []processor.Record{recs["b"]})
		return err
	}
	return recs, api
}

// TestReviewS18Park_AStaleCachedShapeIsNoReadAgain (hole S18-P1): the
// re-read a park (or a recheck) is decided on is the shape cache, which
// every consumer of one Processor shares (the poller's readers of all
// its shards). A report of a hot branch whose records sit on several
// shards is committed by several readers at once: reader a's count
// condition fails because another committer moved the count; a forgets
// the shape, and before a reads it again, readers c1 and c2 store in the
// cache the shape they read before that move (answers that arrived late).
// a then finds "the item as it was sent", and without a read of its own
// sends it once more (the recheck) and parks it the second time: a
// branch report short until `reconcile --repair`, with no damage and no
// operator. The shape a park or a recheck is decided on must be read
// from the table.
func TestReviewS18Park_AStaleCachedShapeIsNoReadAgain(t *testing.T) {
	e := newEnv(t)
	recs, api := lateShapes(t, e, []string{"a", "c1", "c2", "b"}, "c1", "c2")
	// A backoff long beside a cache store, so that the late answers reach
	// the cache between a's failed attempt and its next read.
	p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: 2 * time.Second, MaxBackoff: 2 * time.Second},
		processor.NewMetrics(prometheus.NewRegistry()))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	on := func(name string) context.Context { return context.WithValue(ctx, whoKey{}, name) }

	cErrs := make(chan error, 2)
	for _, name := range []string{"c1", "c2"} {
		go func() {
			_, err := p.Process(on(name), p.MarkerGuard(), []processor.Record{recs[name]})
			cErrs <- err
		}()
		<-api.read[name] // c's read of the report is made (count 1), its answer held
	}
	aDone := make(chan error, 1)
	go func() {
		_, err := p.Process(on("a"), p.MarkerGuard(), []processor.Record{recs["a"]})
		aDone <- err
	}()
	// Each time a's condition failed (it has forgotten the shape), one
	// late answer reaches the cache.
	failed := p.Metrics().Conflicts.WithLabelValues(processor.ConflictConditionFailed)
	late := []string{"c1", "c2"}
	released := 0
	var aErr error
wait:
	for {
		select {
		case aErr = <-aDone:
			break wait
		case <-time.After(time.Millisecond):
		}
		if released < len(late) && int(testutil.ToFloat64(failed)) > released {
			close(api.release[late[released]])
			released++
		}
	}
	for _, name := range late[released:] {
		close(api.release[name])
	}
	close(api.sent)
	for range late {
		require.NoError(t, <-cErrs)
	}
	require.NoError(t, aErr)
	require.Empty(t, api.errs)
	require.Positive(t, released, "a's condition failed on the other committer's move")

	assert.Zero(t, testutil.ToFloat64(p.Metrics().Parked.WithLabelValues(processor.ParkedRefused)), "no part parked")
	diffs, _, err := reconcileBranch(context.Background(), e, "acme", "sp")
	require.NoError(t, err)
	assert.Empty(t, diffs, "the branch report holds the five transactions")
}

// TestReviewS18Park_ASentShapeIsComparedOnlyWithTheReadAfterItsFailure
// (hole S18-P1, second form, found in the first fix): the shape a part
// was sent on when its condition failed is compared once, with the read
// of the table the next attempt makes, and then dropped. Kept, it was
// compared again at every later attempt, on whatever the cache held:
// reader a's condition fails (another committer moved the count), its
// next attempt reads the item and is cancelled by a TransactionConflict
// (no re-read follows), reader c's late answer stores the shape read
// before the move, and a's third attempt took that for "the item as
// sent": a recheck of an item that had changed (a false unchanged_item,
// the part's one recheck spent), and a park with one more late answer.
func TestReviewS18Park_ASentShapeIsComparedOnlyWithTheReadAfterItsFailure(t *testing.T) {
	e := newEnv(t)
	recs, api := lateShapes(t, e, []string{"a", "c", "b"}, "c")
	api.conflictAt, api.conflictLate = 2, "c"
	p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond},
		processor.NewMetrics(prometheus.NewRegistry()))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	on := func(name string) context.Context { return context.WithValue(ctx, whoKey{}, name) }

	cErr := make(chan error, 1)
	go func() {
		_, err := p.Process(on("c"), p.MarkerGuard(), []processor.Record{recs["c"]})
		cErr <- err
	}()
	<-api.read["c"] // c's read of the report is made (count 1), its answer held
	_, aErr := p.Process(on("a"), p.MarkerGuard(), []processor.Record{recs["a"]})
	close(api.sent)
	require.NoError(t, <-cErr)
	require.NoError(t, aErr)
	require.Empty(t, api.errs)
	require.GreaterOrEqual(t, api.aCounts, 3, "a was cancelled on its condition, then by a conflict, then sent again")

	assert.Zero(t, testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues("unchanged_item")), "no recheck: the item had changed")
	assert.Zero(t, testutil.ToFloat64(p.Metrics().Parked.WithLabelValues(processor.ParkedRefused)), "no part parked")
	diffs, _, err := reconcileBranch(context.Background(), e, "acme", "sp")
	require.NoError(t, err)
	assert.Empty(t, diffs, "the branch report holds the four transactions")
}

// TestReviewS18Park_ARecheckIsCountedAndLogged (hole S18-P2): a part whose
// condition failed on an item that reads the same again is sent once
// more; that is the premise of a park met once (on AWS it never is: a
// condition that fails found the item changed), and it must be seen: a
// conflict of reason unchanged_item and a warning naming the report.
func TestReviewS18Park_ARecheckIsCountedAndLogged(t *testing.T) {
	e := newEnv(t)
	rtx{"acme", "sp", "BRL", "2026-11-27", "1", "INCOME", "10", "food"}.put(t, e, "")
	first := newConsumer(t, e, "marker", nil, processor.Config{})
	first.pass() // the report's count is 1
	rtx{"acme", "sp", "BRL", "2026-11-27", "2", "INCOME", "5", "food"}.put(t, e, "")

	rk := aggregates.ReportKey{Tenant: "acme", Branch: "sp", Period: day("2026-11-27")}.Key()
	api := &rolledBackAPI{countFlipAPI: countFlipAPI{DynamoDB: e.ddb, t: t, table: e.table, k: rk}, times: 1}
	var logs bytes.Buffer
	p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, processor.NewMetrics(prometheus.NewRegistry()))
	require.NoError(t, err)
	c := takeOver(t, e, p, first)
	c.pass()
	require.Positive(t, api.met.Load(), "the fault met the count condition")

	assert.Zero(t, testutil.ToFloat64(p.Metrics().Parked.WithLabelValues(processor.ParkedRefused)))
	assert.Equal(t, 1.0, testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues("unchanged_item")))
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "unchanged") {
			line = l
		}
	}
	assert.Contains(t, line, "level=WARN")
	assert.Contains(t, line, rk.PK, "the warning names the report")
	diffs, _, err := reconcileBranch(context.Background(), e, "acme", "sp")
	require.NoError(t, err)
	assert.Empty(t, diffs)
}

// loseRecheckAPI loses the answer of the transaction that sends a part
// once more (the recheck): the transaction lands, the caller sees an
// error (ledgertest.LoseAnswer on the env's faulty client).
type loseRecheckAPI struct {
	*rolledBackAPI
	txs   atomic.Int32
	armed atomic.Bool
}

func (a *loseRecheckAPI) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if a.holdsCountCondition(in) && a.txs.Add(1) == 2 {
		a.armed.Store(true) // the second send of the part: the recheck
	}
	return a.rolledBackAPI.TransactWriteItems(ctx, in, opts...)
}

// TestReviewS18Park_ARecheckWhoseAnswerIsLostLandsOnce (sound, question
// 1): the once-more send of a part whose condition failed on an item read
// again unchanged lands and its answer is lost; the next attempt's guard
// fails (the commit landed), the records are skipped as committed, and
// nothing is applied twice or parked, in each guard mode.
func TestReviewS18Park_ARecheckWhoseAnswerIsLostLandsOnce(t *testing.T) {
	for _, mode := range []string{"marker", "batch"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			rtx{"acme", "sp", "BRL", "2026-11-27", "1", "INCOME", "10", "food"}.put(t, e, "")
			first := newConsumer(t, e, mode, nil, processor.Config{})
			first.pass() // the report's count is 1
			rtx{"acme", "sp", "BRL", "2026-11-27", "2", "INCOME", "5", "food"}.put(t, e, "")

			rk := aggregates.ReportKey{Tenant: "acme", Branch: "sp", Period: day("2026-11-27")}.Key()
			api := &loseRecheckAPI{rolledBackAPI: &rolledBackAPI{countFlipAPI: countFlipAPI{DynamoDB: e.faulty, t: t, table: e.table, k: rk}, times: 1}}
			e.faults.Decide = func(op string) ledgertest.Fault {
				if op == "TransactWriteItems" && api.armed.CompareAndSwap(true, false) {
					return ledgertest.LoseAnswer
				}
				return ledgertest.Pass
			}
			defer func() { e.faults.Decide = nil }()
			p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond},
				processor.NewMetrics(prometheus.NewRegistry()))
			require.NoError(t, err)
			c := takeOver(t, e, p, first)
			c.pass()
			require.GreaterOrEqual(t, api.txs.Load(), int32(2), "the part was sent once more")
			require.False(t, api.armed.Load(), "the once-more send's answer was lost")

			assert.Zero(t, testutil.ToFloat64(p.Metrics().Parked.WithLabelValues(processor.ParkedRefused)))
			assert.Equal(t, 1.0, testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues(processor.ConflictDuplicate)), "the guard found the lost commit")
			diffs, _, err := reconcileBranch(context.Background(), e, "acme", "sp")
			require.NoError(t, err)
			assert.Empty(t, diffs, "each transaction applied once")
			c.drain()
			requireRollupsExact(t, e, true)
		})
	}
}
