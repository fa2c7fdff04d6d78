package processor_test

import (
	"context"
	"strings"
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
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Adversarial review, session 16: the roll-up commit path as built
// (docs/exactly-once.md, "Tenant roll-ups", "Review (adversarial, session
// 16)"). Each test names the hole it reproduces.

// countFlipAPI is DynamoDB Local behind one fault: the first commit
// transaction that sends report k's count as a condition meets another
// committer of the same branch report (a heat split of a hot branch's
// transaction partition puts its records on two shards) which commits
// +1 to the count right before it and −1 right after it (an insert and
// its delete, each a commit that sets updatedAt as every consumer's
// does). The transaction is cancelled on its count condition, and the
// count read again is the count it was sent with.
type countFlipAPI struct {
	processor.DynamoDB
	t       *testing.T
	table   string
	k       aggregates.Key
	flipped atomic.Bool
}

func (a *countFlipAPI) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if !a.holdsCountCondition(in) || !a.flipped.CompareAndSwap(false, true) {
		return a.DynamoDB.TransactWriteItems(ctx, in, opts...)
	}
	a.commitCount(ctx, 1)
	out, err := a.DynamoDB.TransactWriteItems(ctx, in, opts...)
	a.commitCount(ctx, -1)
	return out, err
}

// holdsCountCondition reports whether the transaction updates k on a
// condition naming its count.
func (a *countFlipAPI) holdsCountCondition(in *dynamodb.TransactWriteItemsInput) bool {
	for _, it := range in.TransactItems {
		u := it.Update
		if u == nil || table.KeyOf(u.Key) != a.k {
			continue
		}
		// The count is txCount on a head this version fenced (protocol 4).
		if c := aws.ToString(u.ConditionExpression); strings.Contains(c, "#n = :c") || strings.Contains(c, "#tc = :c") {
			return true
		}
	}
	return false
}

// commitCount is the other committer's commit of d to k's count.
func (a *countFlipAPI) commitCount(ctx context.Context, d int64) {
	time.Sleep(time.Millisecond) // another commit, at another instant
	_, err := a.DynamoDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &a.table, Key: table.Key(a.k),
		UpdateExpression:          aws.String("SET txCount = txCount + :d, updatedAt = :ua"),
		ConditionExpression:       aws.String("transactionCount = :v4"), // fenced by the first pass (protocol 4)
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":d": table.Int(d), ":ua": sAV(time.Now().UTC().Format(time.RFC3339Nano)), ":v4": sAV(table.HeadFence)},
	})
	require.NoError(a.t, err)
}

// takeOver is a consumer of processor p that goes on from first: the
// records first delivered, and first's guard mode.
func takeOver(t *testing.T, e *env, p *processor.Processor, first *consumer) *consumer {
	c := &consumer{t: t, e: e, p: p, mode: first.mode, delivered: first.delivered, g: p.MarkerGuard()}
	if first.mode == "batch" {
		sg := p.ShardGuard(e.streamARN, shardOf(t, e))
		sg.CommitBatches()
		c.g = sg
	}
	return c
}

// TestReviewS16_CountChangedAndBackIsNoUnchangedItem (hole S16-1): a
// branch report's part 0 is cancelled on its count condition because
// another committer moved the count, and by the time the commit reads the
// shape again the other committer has moved it back. The item did change
// (twice), so the part must be sent again on the count read; the commit
// took the equal shape for "nothing changed, it would fail for ever" and
// parked the part as refused: a branch report short by a transaction and
// a parked item only `reconcile --repair` resolves, `branches` then
// judged on a count that lacks it. Fixed by comparing the item's
// updatedAt (every commit sets it) with the shape's other attributes.
func TestReviewS16_CountChangedAndBackIsNoUnchangedItem(t *testing.T) {
	for _, mode := range []string{"marker", "batch"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			rtx{"acme", "sp", "BRL", "2026-11-27", "1", "INCOME", "10", "food"}.put(t, e, "")
			first := newConsumer(t, e, mode, nil, processor.Config{})
			first.pass() // the report's count is 1
			rtx{"acme", "sp", "BRL", "2026-11-27", "2", "INCOME", "5", "food"}.put(t, e, "")

			rk := aggregates.ReportKey{Tenant: "acme", Branch: "sp", Period: day("2026-11-27")}.Key()
			api := &countFlipAPI{DynamoDB: e.ddb, t: t, table: e.table, k: rk}
			reg := prometheus.NewRegistry()
			p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}, processor.NewMetrics(reg))
			require.NoError(t, err)
			c := takeOver(t, e, p, first)
			c.pass()
			require.True(t, api.flipped.Load(), "the fault met the count condition")

			assert.Zero(t, testutil.ToFloat64(p.Metrics().Parked.WithLabelValues(processor.ParkedRefused)), "nothing parked")
			assert.Equal(t, 1.0, testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues(processor.ConflictConditionFailed)),
				"one shape conflict, sent again on the count read")
			diffs, _, err := reconcileBranch(context.Background(), e, "acme", "sp")
			require.NoError(t, err)
			assert.Empty(t, diffs, "the branch report holds both transactions")
			c.drain()
			st := requireRollupsExact(t, e, true)
			assert.Zero(t, st.parked, "no parked item")
			assert.Equal(t, int64(1), branchesOf(t, e, rollupCell{"acme", "BRL", day("2026-11-27")}))
		})
	}
}

// TestReviewS16_ParkedPartialKeepsItsBranches (hole S16-2): a fold refused
// on a damaged partial parks its part in the partial's partition; the
// parked item held the part's figures but not what its part 0 adds to
// branches, so a new branch's first transaction, folded onto a damaged
// partial, was lost from `branches` for good: reconcile named "branches:
// got 2; want 3", the online repair moved the parked figures without it,
// and only the quiescent repair's comparison put it back. The parked item
// now carries the branches (table.WithParkedBranches), which reconcile
// counts and the repair moves with the figures.
func TestReviewS16_ParkedPartialKeepsItsBranches(t *testing.T) {
	e := newEnv(t)
	c := rollupBase(t, e, "batch") // sp and rio count on the 27th in BRL
	for lane := range aggregates.RollupLanes {
		k := aggregates.RollupKey{Tenant: "acme", Currency: "BRL", Lane: lane, Period: brl27.period}.Key()
		_, err := e.ddb.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: &e.table, Key: table.Key(k),
			UpdateExpression:          aws.String("SET totalExpense = :s"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":s": sAV("three")}})
		require.NoError(t, err)
	}
	rtx{"acme", "bh", "BRL", "2026-11-27", "5", "INCOME", "4", "food"}.put(t, e, "") // a third branch on the 27th
	c.pass()                                                                         // stage 1: the delta, branches +1
	c.pass()                                                                         // stage 2: refused on the damaged partial, parked

	var cell *processor.Difference
	diffs := reconcileRollups(t, e)
	for i, d := range diffs {
		if d.Rollup != nil && d.Rollup.RollupCell == (processor.RollupCell{Tenant: "acme", Currency: "BRL", Period: brl27.period}) {
			cell = &diffs[i]
		}
	}
	require.NotNil(t, cell, "the damaged roll-up is named")
	assert.Contains(t, cell.String(), "parked roll-up deltas of its partials", "the fold parked")
	assert.NotContains(t, cell.String(), "branches:", "the parked part keeps the branch it adds")
}
