package processor_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// DynamoDB Local writes an empty map as an untyped {} in stream images and
// the SDK's streams decoder then returns another attribute's value for it.
// Records are classified from their keys first, so a report with an empty
// map is ignored and a transaction carrying an unrelated empty map still
// aggregates exactly.
func TestProcess_EmptyMapAttributesInStreamImages(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
	empty := &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{}}
	for _, item := range []map[string]ddbtypes.AttributeValue{
		{"PK": s("TENANT#acme#BRANCH#north#TRANSACTION"), "SK": s("2024-05-01#e1"), "entityType": s("TRANSACTION"),
			"type": s("INCOME"), "amount": &ddbtypes.AttributeValueMemberN{Value: "7.25"}, "category": s("food"),
			"createdAt": s("2024-05-01T08:00:00Z"), "tags": empty},
		{"PK": s("TENANT#acme#BRANCH#north#REPORTING"), "SK": s("DAILY#2023-01-01"), "entityType": s("REPORT"), "byCategory": empty},
	} {
		_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: item})
		require.NoError(t, err)
	}
	shard, recs := e.records(t)
	require.Len(t, recs, 3, "the default flags item, the transaction, the report")
	p := e.processor(t, nil, nil)
	res, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Applied)
	assert.Equal(t, 2, res.Ignored)
	// The stray report item is not a fold of anything; reconcile flags it
	// (zero expected), everything else must agree.
	diffs, _, err := reconcileBranch(ctx, e, "acme", "north")
	require.NoError(t, err)
	for _, d := range diffs {
		assert.Equal(t, "DAILY#2023-01-01", d.Report.Period.String(), "only the planted report differs: %s", d)
	}
}
