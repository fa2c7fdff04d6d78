package table_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// TestParkedBranches_RoundTrip (review, session 16, hole S16-2): a
// partial's parked delta carries the branches its part 0 adds; none is
// written for 0, an absent one reads 0, and one that is no integer is an
// error naming the item, never a silent 0.
func TestParkedBranches_RoundTrip(t *testing.T) {
	k := aggregates.RollupKey{Tenant: "acme", Currency: "BRL", Lane: 3, Period: aggregates.Period{Type: aggregates.Daily, Value: "2026-11-27"}}.Report()
	parked := func(branches int64) map[string]types.AttributeValue {
		item := table.ParkedItem(k, "shard~1", &aggregates.Report{}, table.ParkedInfo{Reason: "item_malformed"})
		table.WithParkedBranches(item, branches)
		return item
	}
	for _, n := range []int64{0, 1, -2} {
		got, err := table.ParkedBranches(parked(n))
		require.NoError(t, err)
		assert.Equal(t, n, got)
	}
	_, present := parked(0)[table.AttrBranches]
	assert.False(t, present, "no attribute for 0")

	bad := parked(1)
	bad[table.AttrBranches] = &types.AttributeValueMemberS{Value: "one"}
	_, err := table.ParkedBranches(bad)
	assert.ErrorContains(t, err, "branches is not an integer")
}

// TestDecodeReportShape_ReadsUpdatedAt (hole S16-1): the shape a consumer
// reads names the item's updatedAt, projected with the rest.
func TestDecodeReportShape_ReadsUpdatedAt(t *testing.T) {
	assert.Contains(t, table.ReportShapeAttributes(), table.AttrUpdatedAt)
	sh := table.DecodeReportShape(map[string]types.AttributeValue{
		table.AttrTransactionCount: &types.AttributeValueMemberN{Value: "1"},
		table.AttrUpdatedAt:        &types.AttributeValueMemberS{Value: "2026-11-27T12:00:00.1Z"},
	})
	assert.Equal(t, "2026-11-27T12:00:00.1Z", sh.UpdatedAt)
	assert.Empty(t, table.DecodeReportShape(nil).UpdatedAt)
}
