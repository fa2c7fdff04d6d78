package processor_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// The adversarial review of issue 25 step A as built (session 18,
// docs/exactly-once.md, "Review (adversarial, session 18): step A as
// built"): sequences the review tried against the standard-mode runs'
// counts on DynamoDB Local.

// putTombstoneInsert puts, as the writer's counted write would leave it,
// a transaction's tombstone under a key that had no item (an INSERT of a
// tombstone: writer-shaped, changes = 1, and without effect on any
// report): a record that the runs now claim and count although it
// changes no figure.
func putTombstoneInsert(t *testing.T, e *env, branch, id string) {
	t.Helper()
	k := aggregates.Key{PK: aggregates.TransactionPK("t", branch), SK: "2024-04-01#" + id}
	item := map[string]ddbtypes.AttributeValue{
		"PK": sAV(k.PK), "SK": sAV(k.SK), "entityType": sAV(aggregates.EntityTransaction),
		"createdAt": sAV("2024-04-01T12:00:00Z"), "version": nAV("1"),
		table.AttrDeletedAt: sAV("2024-04-02T00:00:00Z"),
	}
	table.Count(item, 1)
	_, err := e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &e.table, Item: item})
	require.NoError(t, err)
}

// Records of many branches in one batch: each run's transaction carries
// one applied update per branch besides the claim and the end-keyed
// marker, so a batch of records of 150 branches, none of which changes a
// report, is cut into runs of at most 98 branches (the default 99 items
// less the end marker: claim + 98 + end = 100, TransactWriteItems' limit),
// and a lost answer on the first and on a later run's transaction, a
// redelivery from the start, a short redelivery ending inside the second
// run and the whole batch again count every record exactly once. The
// branches' records are interleaved with records of branch x that do
// change reports, so effective and counted-only records share runs.
func TestReviewS18Counted_ManyBranchesInOneBatchAreCutAndCountedOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	const branches = 150
	for i := range branches {
		putTombstoneInsert(t, e, fmt.Sprintf("b%03d", i), "z")
		if i%30 == 0 {
			putCounted(t, e, fmt.Sprintf("a%03d", i), "10", 1)
		}
	}
	recs := partitionRecords(t, e, 0)
	require.Len(t, recs, branches+branches/30)

	var calls atomic.Int64
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op != "TransactWriteItems" {
			return ledgertest.Pass
		}
		switch calls.Add(1) {
		case 1, 3:
			return ledgertest.LoseAnswer // the first run's and a later one's: landed, the caller sees an error
		}
		return ledgertest.Pass
	}
	p := e.processor(t, nil, e.faulty)
	res, err := p.Process(ctx, p.MarkerGuard(), recs)
	require.NoError(t, err)
	t.Logf("first delivery: %+v, transactions sent %d", res, calls.Load())
	for _, batch := range [][]processor.Record{recs, recs[:120], recs} {
		_, err := p.Process(ctx, p.MarkerGuard(), batch)
		require.NoError(t, err)
	}
	var sum int64
	for i := range branches {
		a := appliedOf(t, e, "t", fmt.Sprintf("b%03d", i))
		assert.Equal(t, table.Applied{Exists: true, Applied: 1}, a, "branch b%03d", i)
		sum += a.Applied
	}
	x := appliedOf(t, e, "t", "x")
	assert.Equal(t, table.Applied{Exists: true, Applied: int64(branches / 30)}, x)
	assert.Equal(t, int64(branches), sum)
	e.requireReconciled(t)
}

// beforeFirstCommit runs hook once, right before the first
// TransactWriteItems it forwards: another consumer's commit landing
// between this one's walk and its commit.
type beforeFirstCommit struct {
	processor.DynamoDB
	hook func()
	done bool
}

func (b *beforeFirstCommit) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if !b.done {
		b.done = true
		b.hook()
	}
	return b.DynamoDB.TransactWriteItems(ctx, in, opts...)
}

// Hole 1 (mixed versions on one batch): a version before step A keys a
// run by its first record with an effect on the reports, stepping over
// the records before it that change none; step A keys it by its first
// counted record. Records A (a writer-shaped tombstone of an absent item:
// counted, no effect) and B (a create) delivered at once to both: the old
// version's run [B] claims RUN#B — played here by a consumer given the
// batch [B], which is the run the old version's walk leaves of [A, B] and
// claims the same marker — between the new version's walk and its commit
// of [A, B], which claimed RUN#A only: B was applied twice. The new
// version's run whose first record changes no report now also claims,
// on the same condition, the marker the old version keys it by (its first
// record that needs a claim), so one of the two commits is refused and
// re-walks.
func TestReviewS18Counted_AnOlderVersionsRunOnTheSameBatchIsExcluded(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	putTombstoneInsert(t, e, "x", "a")
	putCounted(t, e, "b", "10", 1)
	recs := partitionRecords(t, e, 0)
	require.Len(t, recs, 2)

	old := e.processor(t, nil, nil)
	api := &beforeFirstCommit{DynamoDB: e.ddb, hook: func() {
		_, err := old.Process(ctx, old.MarkerGuard(), recs[1:])
		require.NoError(t, err)
	}}
	p := e.processor(t, nil, api)
	_, err := p.Process(ctx, p.MarkerGuard(), recs)
	require.NoError(t, err)
	require.True(t, api.done)
	assert.Equal(t, 1.0, testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues(processor.ConflictDuplicate)),
		"the new version's commit is refused by the old version's claim")
	e.requireReconciled(t) // B applied once
}

// The claim under the older key takes an item of the run's transaction:
// the planner reserves it for a run whose first record needs no claim of
// its own. A counted record without effect, then an invalid transaction
// (a quarantine item, no report entry: planning it again without the
// report shapes cuts nothing more), then records of 120 more branches:
// the first run is planned to the full 100 items with the older key's
// claim among them, and every record is counted once.
func TestReviewS18Counted_TheOlderKeysClaimHasItsRoomInTheRun(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	putTombstoneInsert(t, e, "b000", "z")
	_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]ddbtypes.AttributeValue{
		"PK": sAV(aggregates.TransactionPK("t", "x")), "SK": sAV("2024-04-01#bad"),
		"entityType": sAV(aggregates.EntityTransaction), "type": sAV("BOGUS"), "amount": nAV("1"),
	}})
	require.NoError(t, err)
	for i := 1; i <= 120; i++ {
		putTombstoneInsert(t, e, fmt.Sprintf("b%03d", i), "z")
	}
	recs := partitionRecords(t, e, 0)
	p := e.processor(t, nil, nil)
	res, err := p.Process(ctx, p.MarkerGuard(), recs)
	require.NoError(t, err)
	assert.Equal(t, 2, res.Runs)
	for i := 0; i <= 120; i++ {
		assert.Equal(t, int64(1), appliedOf(t, e, "t", fmt.Sprintf("b%03d", i)).Applied, "branch b%03d", i)
	}
	assert.Equal(t, table.Applied{Exists: true, Foreign: 1}, appliedOf(t, e, "t", "x"))
}
