package processor_test

import (
	"context"
	"fmt"
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

// Plan layout 6 wired (docs/exactly-once.md, "Plan layout 6", session 21):
// batches counted in the branches' applied items, one roll-up delta per
// (tenant, currency) per batch, the branch transitions staged in the
// coordination table (open question 9's branches-only items).

// layout6Writes counts what a layout-6 commit adds to its transactions.
type layout6Writes struct {
	stagingPuts, stagingUpdates, stagingDeletes int
	openAdds, openDeletes                       int
	plans                                       map[string]bool // the plan strings of the batches claimed
}

// recordingAPI passes every call on and keeps what the transactions
// wrote of layout 6.
type recordingAPI struct {
	processor.DynamoDB
	mu sync.Mutex
	w  layout6Writes
}

func (r *recordingAPI) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := r.DynamoDB.TransactWriteItems(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	staging := func(item map[string]ddbtypes.AttributeValue) bool {
		pk, _ := table.String(item, table.AttrPK)
		return strings.HasPrefix(pk, table.StagingPrefix)
	}
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil && staging(it.Put.Item):
			r.w.stagingPuts++
		case it.Update != nil && staging(it.Update.Key):
			r.w.stagingUpdates++
		case it.Delete != nil && staging(it.Delete.Key):
			r.w.stagingDeletes++
		case it.Update != nil && strings.Contains(aws.ToString(it.Update.UpdateExpression), "ADD #o"):
			r.w.openAdds++
		case it.Update != nil && strings.Contains(aws.ToString(it.Update.UpdateExpression), "DELETE #o"):
			r.w.openDeletes++
		}
		if it.Update != nil {
			if plan, ok := table.String(it.Update.ExpressionAttributeValues, ":plan"); ok {
				if r.w.plans == nil {
					r.w.plans = map[string]bool{}
				}
				r.w.plans[plan] = true
			}
		}
	}
	return out, nil
}

// coordItems scans the coordination table for items whose partition key
// starts with prefix.
func coordItems(t *testing.T, e *env, prefix string) []map[string]ddbtypes.AttributeValue {
	t.Helper()
	coord := table.CoordinationTableName(e.table)
	var out []map[string]ddbtypes.AttributeValue
	p := dynamodb.NewScanPaginator(e.ddb, &dynamodb.ScanInput{TableName: &coord, ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		require.NoError(t, err)
		for _, item := range page.Items {
			if pk, _ := table.String(item, table.AttrPK); strings.HasPrefix(pk, prefix) {
				out = append(out, item)
			}
		}
	}
	return out
}

// batch6Txs writes a batch of transactions over two tenants, six branches
// in three currencies (one without; acme's b0 and b2 both in BRL, so that
// a roll-up has contributors from several branches) and several days.
func batch6Txs(t *testing.T, e *env, n int) {
	t.Helper()
	curs := []string{"BRL", "EUR", "BRL", "EUR", "BRL", ""}
	for i := range n {
		j := i % 6
		rtx{[]string{"acme", "beta"}[j/3], fmt.Sprint("b", j), curs[j], fmt.Sprintf("2026-11-%02d", 1+i%7), fmt.Sprint(i), []string{"INCOME", "EXPENSE"}[i%3%2],
			"1.25", fmt.Sprint("cat", i%5)}.put(t, e, "")
	}
}

// requireEveryRecordCounted checks that every branch's applied item counts
// each record of its transaction partition in the stream once, and that
// no open mark and no staging item is left.
func requireEveryRecordCounted(t *testing.T, e *env) {
	t.Helper()
	_, recs := e.records(t)
	per := map[[2]string]int64{}
	for _, r := range recs {
		pk, _ := table.String(r.Keys, table.AttrPK)
		if tenant, branch, ok := aggregates.ParseTransactionPK(pk); ok {
			per[[2]string{tenant, branch}]++
		}
	}
	require.NotEmpty(t, per)
	for tb, n := range per {
		a := appliedOf(t, e, tb[0], tb[1])
		assert.Equal(t, n, a.Applied+a.Probed+a.Foreign+a.Compacted, "branch %s/%s: its records, each counted once", tb[0], tb[1])
	}
	for _, item := range coordItems(t, e, "APPLIED#") {
		assert.NotContains(t, item, table.AttrOpen, "no open mark is left once the batch is finished")
	}
	assert.Empty(t, coordItems(t, e, table.StagingPrefix), "every staging item is deleted by its delta group")
}

// laneClaims returns the claim kinds ("b", "t", "g…") of the roll-up delta
// items in the lanes.
func laneClaims(t *testing.T, e *env) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, k := range readRollups(t, e).deltaKeys {
		claim, _, _ := strings.Cut(k.SK, "#")
		kind := claim[strings.LastIndex(claim, "~")+1:]
		if strings.HasPrefix(kind, "g") {
			kind = "g"
		}
		out[kind]++
	}
	return out
}

// A batch of several groups, roll-ups on: its staging items are written
// and deleted, its branches opened and closed, its roll-up delta is the
// sum of its parts with branches exact (stage 1 and after the folds),
// reconcile finds nothing, and every branch's applied item counts each of
// its records once.
func TestBatch6_SeveralGroupsCommitExactlyAndCountEveryRecord(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	batch6Txs(t, e, 120)
	_, recs := e.records(t)
	api := &recordingAPI{DynamoDB: e.ddb}
	p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		MaxItemsPerRun: 12, MaxEntriesPerItem: 2}, nil)
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shardOf(t, e))
	g.CommitBatches()
	res, err := p.Process(ctx, g, recs)
	require.NoError(t, err)
	assert.Greater(t, res.Runs, 3, "a first run and a batch of several groups")
	assert.Equal(t, map[string]bool{"12/2/6/32": true}, api.w.plans)
	assert.Positive(t, api.w.stagingPuts, "transitions staged by a group before their item's")
	assert.Equal(t, api.w.stagingPuts, api.w.stagingDeletes, "each staging item put once (kfirst) and deleted once")
	assert.Positive(t, api.w.openAdds, "branches whose parts span groups are opened")
	assert.Equal(t, api.w.openAdds, api.w.openDeletes, "and closed by their count")
	claims := laneClaims(t, e)
	assert.Zero(t, claims["g"], "no per-group delta of layout 4")
	assert.Positive(t, claims["b"], "the batch's figure items")
	assert.Positive(t, claims["t"], "the batch's branches-only items")
	requireRollupsExact(t, e, true)
	requireEveryRecordCounted(t, e)

	newConsumer(t, e, "batch", nil, processor.Config{}).drain()
	requireRollupsExact(t, e, true)
	e.requireReconciled(t)
	requireEveryRecordCounted(t, e)
}

// An edit and its revert in one batch change no report and move applied
// by their two records, in one group of counts alone.
func TestBatch6_ANettingBatchMovesAppliedByTwoAndNoReport(t *testing.T) {
	e := newEnv(t)
	tx := rtx{"acme", "sp", "BRL", "2026-11-27", "1", "INCOME", "10", "food"}
	tx.put(t, e, "")
	c := newConsumer(t, e, "batch", nil, processor.Config{})
	c.pass()
	before := appliedOf(t, e, "acme", "sp")
	require.Equal(t, int64(1), before.Applied+before.Foreign, "the shard's first run counts its record")
	dayKey := aggregates.ReportKey{Tenant: "acme", Branch: "sp", Period: day("2026-11-27")}
	report := getReport(t, e, dayKey)
	require.NotNil(t, report)

	edit := tx
	edit.amount = "25"
	edit.put(t, e, "")
	tx.put(t, e, "")
	res := c.pass()
	assert.Equal(t, 1, res.Runs, "one group: the branch's count alone")
	after := appliedOf(t, e, "acme", "sp")
	assert.Equal(t, int64(2), after.Applied+after.Foreign-before.Applied-before.Foreign, "the edit and its revert, counted")
	assert.Equal(t, report, getReport(t, e, dayKey), "the report is untouched")
	requireEveryRecordCounted(t, e)
	e.requireReconciled(t)
}

// crashMidBatch6 has a consumer with small groups die in the middle of a
// batch: its first run and three groups land (the third with its answer
// lost), then every write is dropped. It returns the records and the
// pending plan string. old plans under the layout before 6.
func crashMidBatch6(t *testing.T, e *env, old bool) ([]processor.Record, string) {
	t.Helper()
	ctx := context.Background()
	_, recs := e.records(t)
	var writes atomic.Int64
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op != "TransactWriteItems" {
			return ledgertest.Pass
		}
		switch n := writes.Add(1); {
		case n < 4:
			return ledgertest.Pass
		case n == 4:
			return ledgertest.LoseAnswer // it lands; the process dies before it learns so
		}
		return ledgertest.Drop
	}
	defer func() { e.faults.Decide = nil }()
	p, err := processor.New(e.faulty, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		MaxItemsPerRun: 12, MaxEntriesPerItem: 2, MaxAttempts: 2}, nil)
	require.NoError(t, err)
	if old {
		processor.PlanOldLayoutForTest(p)
	}
	g := p.ShardGuard(e.streamARN, shardOf(t, e))
	g.CommitBatches()
	_, err = p.Process(ctx, g, recs)
	require.Error(t, err, "the first consumer dies mid-batch")
	require.True(t, g.Pending(), "a half-committed batch is left")
	coord := table.CoordinationTableName(e.table)
	out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &coord, Key: table.Key(aggregates.CheckpointKey(e.streamARN, shardOf(t, e))), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	cp, err := table.DecodeCheckpoint(shardOf(t, e), out.Item)
	require.NoError(t, err)
	require.NotNil(t, cp.Pending)
	return recs, cp.Pending.Plan
}

// A consumer dies between groups of a layout-6 batch (staging items
// written, their delta groups not landed); a resumer with other limits
// plans the same groups from the stored plan and digest, reads the staged
// transitions and finishes the batch exactly.
func TestBatch6_CrashBetweenGroupsThenAResumerFinishesExactly(t *testing.T) {
	e := newEnv(t)
	batch6Txs(t, e, 120)
	recs, plan := crashMidBatch6(t, e, false)
	assert.Equal(t, "12/2/6/32", plan)
	require.NotEmpty(t, coordItems(t, e, table.StagingPrefix), "the landed groups staged transitions for later groups")

	c := newConsumer(t, e, "batch", nil, processor.Config{}) // default limits: the stored plan rules
	res := c.deliver(recs...)
	assert.Positive(t, res.Runs, "the resumer commits the batch's other groups")
	requireRollupsExact(t, e, true)
	requireEveryRecordCounted(t, e)
	c.drain()
	requireRollupsExact(t, e, true)
	e.requireReconciled(t)
}

// stagingEraser deletes each staging item right before a delta group's
// read of it (as TTL would after 7 days pending, or a hand): the item is
// gone while the checkpoint still names the group.
type stagingEraser struct {
	processor.DynamoDB
	erased map[string]bool
}

func (s *stagingEraser) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if pk, _ := table.String(in.Key, table.AttrPK); strings.HasPrefix(pk, table.StagingPrefix) {
		sk, _ := table.String(in.Key, table.AttrSK)
		if !s.erased[pk+sk] {
			s.erased[pk+sk] = true
			if _, err := s.DynamoDB.(*dynamodb.Client).DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: in.TableName, Key: in.Key}); err != nil {
				return nil, err
			}
		}
	}
	return s.DynamoDB.GetItem(ctx, in, opts...)
}

// A staging item deleted while its batch is pending, right before its
// delta group reads it: the group puts its delta without the staged
// transitions and without the staging delete, counts staging_gone once
// per item, and the batch finishes (never a stuck shard). Figures stay
// exact; only branches may be off.
func TestBatch6_StagingGoneIsCountedAndTheBatchFinishes(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	batch6Txs(t, e, 120)
	_, recs := e.records(t)
	api := &stagingEraser{DynamoDB: e.ddb, erased: map[string]bool{}}
	reg := prometheus.NewRegistry()
	p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		MaxItemsPerRun: 12, MaxEntriesPerItem: 2}, processor.NewMetrics(reg))
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shardOf(t, e))
	g.CommitBatches()
	_, err = p.Process(ctx, g, recs)
	require.NoError(t, err, "the batch finishes")
	assert.False(t, g.Pending())
	require.NotEmpty(t, api.erased, "the batch staged transitions and read them back")
	assert.Equal(t, float64(len(api.erased)), testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues(processor.ConflictStagingGone)),
		"each staging item found gone, counted once")
	requireRollupsExact(t, e, false)
	requireEveryRecordCounted(t, e)
}

// A batch left pending by the layout before 6 (4) is finished by this
// version as it was planned: its groups' own deltas (…~g{k}), no staging,
// and uncounted — the count groups of "The previous layout's pending
// batch" (;f4) are not built yet: only the shard's first run, committed
// by the old consumer with a counting run, is in the applied items.
func TestBatch6_Layout4PendingBatchIsFinishedAsPlannedUncounted(t *testing.T) {
	e := newEnv(t)
	batch6Txs(t, e, 90)
	recs, plan := crashMidBatch6(t, e, true)
	assert.Equal(t, "12/2/4/32", plan)

	api := &recordingAPI{DynamoDB: e.ddb}
	p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}, nil)
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shardOf(t, e))
	g.CommitBatches()
	_, err = p.Process(context.Background(), g, recs)
	require.NoError(t, err)
	assert.False(t, g.Pending())
	assert.Equal(t, layout6Writes{}, api.w, "no staging write, no open mark, no new batch claimed")
	claims := laneClaims(t, e)
	assert.Positive(t, claims["g"])
	assert.Zero(t, claims["b"]+claims["t"], "no layout-6 delta item")
	requireRollupsExact(t, e, true)
	var counted int64
	for _, item := range coordItems(t, e, "APPLIED#") {
		a, err := table.DecodeApplied(item)
		require.NoError(t, err)
		counted += a.Applied + a.Probed + a.Foreign + a.Compacted
	}
	assert.Equal(t, int64(1), counted, "the first run's record alone: the layout-4 batch is finished uncounted")
	newConsumer(t, e, "batch", nil, processor.Config{}).drain()
	requireRollupsExact(t, e, true)
	e.requireReconciled(t)
}

// Roll-ups off (Config.NoRollups): batches are planned 12/2/6/0 and count
// every record, with open marks, and put no roll-up delta and no staging
// item.
func TestBatch6_RollupsOffCountsToo(t *testing.T) {
	e := newEnv(t)
	batch6Txs(t, e, 120)
	_, recs := e.records(t)
	api := &recordingAPI{DynamoDB: e.ddb}
	p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		MaxItemsPerRun: 12, MaxEntriesPerItem: 2, NoRollups: true}, nil)
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shardOf(t, e))
	g.CommitBatches()
	_, err = p.Process(context.Background(), g, recs)
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{"12/2/6/0": true}, api.w.plans)
	assert.Zero(t, api.w.stagingPuts+api.w.stagingUpdates+api.w.stagingDeletes, "no staging")
	assert.Positive(t, api.w.openAdds, "branches whose parts span groups are opened")
	assert.Equal(t, api.w.openAdds, api.w.openDeletes)
	assert.Zero(t, readRollups(t, e).lane, "no roll-up delta")
	requireEveryRecordCounted(t, e)
	e.requireReconciled(t)
}

// Every transaction of a layout-6 batch lands with its answer lost (its
// retry finds the claim taken and the guard read again goes on from the
// next group): counts, open marks, staging writes and deltas each land
// once; no staging item is taken for gone.
func TestBatch6_EveryGroupsAnswerLostLandsEachWriteOnce(t *testing.T) {
	e := newEnv(t)
	batch6Txs(t, e, 90)
	_, recs := e.records(t)
	var calls atomic.Int64
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op == "TransactWriteItems" && calls.Add(1)%2 == 1 {
			return ledgertest.LoseAnswer
		}
		return ledgertest.Pass
	}
	reg := prometheus.NewRegistry()
	api := &recordingAPI{DynamoDB: e.faulty}
	p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		MaxItemsPerRun: 12, MaxEntriesPerItem: 2}, processor.NewMetrics(reg))
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shardOf(t, e))
	g.CommitBatches()
	_, err = p.Process(context.Background(), g, recs)
	require.NoError(t, err)
	e.faults.Decide = nil
	assert.False(t, g.Pending())
	assert.Positive(t, testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues(processor.ConflictDuplicate)), "the lost answers were met")
	assert.Zero(t, testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues(processor.ConflictStagingGone)))
	requireRollupsExact(t, e, true)
	requireEveryRecordCounted(t, e)
	newConsumer(t, e, "batch", nil, processor.Config{}).drain()
	requireRollupsExact(t, e, true)
	e.requireReconciled(t)
}
