package processor_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/handler"
)

// An event source mapping that loses its checkpoints rewinds to an earlier
// batch start. Batches acknowledged without effect (no transaction, only
// poison) leave no run marker; the chain walk must step over them to the
// markers of the runs after them, or those runs are applied twice.
func TestMarkerGuard_RewindAcrossBatchesWithoutEffect(t *testing.T) {
	for _, between := range []string{"tenant item", "poison transaction", "both", "zero-delta modify"} {
		t.Run(between, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
			txn := func(id, amount string) map[string]ddbtypes.AttributeValue {
				return map[string]ddbtypes.AttributeValue{"PK": s("TENANT#t#BRANCH#b#TRANSACTION"), "SK": s("2024-01-01#" + id),
					"entityType": s("TRANSACTION"), "type": s("INCOME"), "amount": &ddbtypes.AttributeValueMemberN{Value: amount},
					"category": s("food"), "createdAt": s("2024-01-01T10:00:00Z")}
			}
			items := []map[string]ddbtypes.AttributeValue{txn("a", "1")}
			switch between {
			case "zero-delta modify":
				// Its run's delta is zero, but it has an effect: its run
				// must be claimed.
				edited := txn("a", "1")
				edited["description"] = s("edited")
				items = append(items, edited)
			case "tenant item", "both":
				items = append(items, map[string]ddbtypes.AttributeValue{"PK": s("TENANT#t"), "SK": s("METADATA"), "entityType": s("TENANT")})
			}
			if between == "poison transaction" || between == "both" {
				items = append(items, txn("p", "0")) // invalid: amount not positive
			}
			items = append(items, txn("b", "2"), txn("c", "4"))
			for _, item := range items {
				_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: item})
				require.NoError(t, err)
			}
			_, recs := e.records(t)
			recs = recs[1:] // the default flags item
			require.Len(t, recs, len(items))
			p := e.processor(t, nil, nil)
			deliver := func(batch []processor.Record) {
				// As the mapping does: redeliver from the record the
				// handler names until the batch is through.
				for len(batch) > 0 {
					res, err := p.Process(ctx, p.MarkerGuard(), batch)
					require.NoError(t, err)
					require.Positive(t, res.Committed+len(batch)-1, "no progress")
					if res.Committed == len(batch) {
						return
					}
					batch = append([]processor.Record(nil), batch[res.Committed:]...)
				}
			}
			// One record per batch, acknowledged; then every earlier start
			// again with everything after it, and odd cuts.
			for i := range recs {
				deliver(recs[i : i+1])
			}
			for start := range recs {
				deliver(recs[start:])
				for end := start + 1; end <= len(recs); end++ {
					deliver(recs[start:end])
				}
			}
			e.requireReconciled(t)
			diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{Tenant: "t", Branch: "b"})
			require.NoError(t, err)
			assert.Empty(t, diffs, fmt.Sprint(diffs))
		})
	}
}

// Issue 12, defect 2: a redelivery that ends inside a committed run needs an
// alias marker at its last record. When that write fails (throttled past
// the attempts, or the deadline), the answer must name a record the chain
// walk can follow (one with a marker), never the batch's last record, which
// sits inside the committed run and has none: a redelivery from it would
// apply the run's tail a second time.
func TestMarkerGuard_FailedAliasWriteNeverNamesARecordInsideACommittedRun(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
	for _, id := range []string{"a", "b", "c", "d"} {
		_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]ddbtypes.AttributeValue{
			"PK": s("TENANT#t#BRANCH#b#TRANSACTION"), "SK": s("2024-01-01#" + id),
			"entityType": s("TRANSACTION"), "type": s("INCOME"), "amount": &ddbtypes.AttributeValueMemberN{Value: "1"},
			"category": s("food"), "createdAt": s("2024-01-01T10:00:00Z")}})
		require.NoError(t, err)
	}
	_, recs := e.records(t)
	recs = recs[1:] // the default flags item
	require.Len(t, recs, 4)

	// Records 0..3 committed as one run.
	p := e.processor(t, nil, nil)
	res, err := p.Process(ctx, p.MarkerGuard(), recs)
	require.NoError(t, err)
	require.Equal(t, 4, res.Committed)

	// Redelivered shorter, 0..2, with the alias marker's PutItem throttled.
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op == "PutItem" {
			return ledgertest.Throttle
		}
		return ledgertest.Pass
	}
	faulty, err := processor.New(e.faulty, processor.Config{Table: e.table, MaxAttempts: 2, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
	require.NoError(t, err)
	batch := recs[:3]
	res, perr := faulty.Process(ctx, faulty.MarkerGuard(), batch)
	require.Error(t, perr, "the alias write failed")
	resp, herr := handler.StandardResponse(batch, res, perr)
	e.faults.Decide = nil

	// The mapping resumes where the answer says: the whole batch again on an
	// error, else from the named record, with the records after it.
	from := 0
	if herr == nil {
		require.Len(t, resp.BatchItemFailures, 1)
		from = slices.IndexFunc(recs, func(r processor.Record) bool {
			return r.SequenceNumber == resp.BatchItemFailures[0].ItemIdentifier
		})
		require.GreaterOrEqual(t, from, 0)
	}
	for batch := recs[from:]; len(batch) > 0; {
		res, err := p.Process(ctx, p.MarkerGuard(), batch)
		require.NoError(t, err)
		batch = batch[res.Committed:]
	}
	diffs, _, err := reconcileBranch(ctx, e, "t", "b")
	require.NoError(t, err)
	assert.Empty(t, diffs, "income counted once per record: %v", diffs)
}
