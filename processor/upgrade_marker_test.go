package processor_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/table"
)

// Upgrading the standard-mode Lambda past issue 27 (found by its review).
// Before issue 27 the marker walk stepped over an invalid record (it was "without effect"): a batch
// [p (invalid), b, c] was committed as the run [b, c], its marker keyed by
// b, and p's quarantine item put on its own; no marker is keyed by p. The
// event source mapping redelivers that batch from p (a whole-batch retry
// after a timeout or crash of the old function: the very symptom issue 27
// fixes, so the new version is deployed exactly then; or a rewind across
// acknowledged batches, which "Guard 2" designs for). A walk that stopped
// at p (now claimed with its run) found no marker for p and committed the
// run [p, b, c] under a new marker keyed by p: b and c applied twice. The
// walk looks through records that only need a quarantine item to the next
// record with an effect, finds b's marker and follows it.
func TestMarkerGuard_UpgradeRedeliveryFromAnInvalidRecordBeforeAnOldRun(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
	txn := func(id, amount string) map[string]ddbtypes.AttributeValue {
		return map[string]ddbtypes.AttributeValue{"PK": s("TENANT#t#BRANCH#b#TRANSACTION"), "SK": s("2024-01-01#" + id),
			"entityType": s("TRANSACTION"), "type": s("INCOME"), "amount": &ddbtypes.AttributeValueMemberN{Value: amount},
			"category": s("food"), "createdAt": s("2024-01-01T10:00:00Z")}
	}
	for _, item := range []map[string]ddbtypes.AttributeValue{txn("p", "0"), txn("b", "2"), txn("c", "4")} {
		_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: item})
		require.NoError(t, err)
	}
	_, recs := e.records(t)
	recs = recs[1:] // the default flags item
	require.Len(t, recs, 3)
	p := e.processor(t, nil, nil)

	// What the version before issue 27 left for the batch [p, b, c]: the
	// run [b, c] under the marker keyed by b, and p's quarantine item put
	// outside the commit.
	res, err := p.Process(ctx, p.MarkerGuard(), recs[1:])
	require.NoError(t, err)
	require.Equal(t, 2, res.Committed)
	_, err = e.ddb.PutItem(ctx, table.PutQuarantine(e.table, table.QuarantineItem(table.Quarantined{
		ID: recs[0].EventID, EventID: recs[0].EventID, EventName: recs[0].EventName, SequenceNumber: recs[0].SequenceNumber,
		StreamARN: recs[0].StreamARN, Reason: "amount_not_positive", Detail: "old version", Field: "amount",
		At: time.Now().UTC().Format(time.RFC3339Nano), Record: "{}",
	})))
	require.NoError(t, err)
	diffs, _, err := reconcileBranch(ctx, e, "t", "b")
	require.NoError(t, err)
	require.Empty(t, diffs, "the old version's state is exact")

	// The new version gets the batch again from p.
	res, err = p.Process(ctx, p.MarkerGuard(), recs)
	require.NoError(t, err)
	require.Equal(t, 3, res.Committed)
	diffs, _, err = reconcileBranch(ctx, e, "t", "b")
	require.NoError(t, err)
	assert.Empty(t, diffs, "b and c applied once: %v (applied %d, duplicates %d)", diffs, res.Applied, res.Duplicates)
}
