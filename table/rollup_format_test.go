package table_test

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// TestDecodeRollupDelta_NewerFormatIsRefusedByName (S16-3): a delta item
// without a format, or of format 1, is read; one of a later format is
// refused with ErrNewerDeltaFormat before anything else is judged (its
// other attributes may be new too); a format that is no positive integer
// is damage like any other fault, not a newer format. This version writes
// no format attribute, so the consumers before it read its items.
func TestDecodeRollupDelta_NewerFormatIsRefusedByName(t *testing.T) {
	good := func() map[string]types.AttributeValue {
		return table.EncodeRollupDelta(aggregates.RollupDeltaKey("acme", 1, "c", "BRL", 0), "BRL",
			map[aggregates.Period]*aggregates.RollupDelta{rollupPeriod(aggregates.Daily, "2026-11-27"): rollupDelta(2, 1)}, "2026-11-27T10:00:00Z")
	}
	_, written := good()[table.AttrRollupDeltaFormat]
	assert.False(t, written, "format 1 is written as no attribute")
	tests := []struct {
		name   string
		format types.AttributeValue // nil: absent
		newer  bool
		bad    string // a fault other than a newer format
	}{
		{"absent", nil, false, ""},
		{"1", table.Int(1), false, ""},
		{"2", table.Int(2), true, ""},
		{"2 with a new figure in a period", table.Int(2), true, ""},
		{"0", table.Int(0), false, "not a format number"},
		{"a string", table.S("2"), false, "not a format number"},
		{"a fraction", &types.AttributeValueMemberN{Value: "1.5"}, false, "not a format number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			item := good()
			if tt.format != nil {
				item[table.AttrRollupDeltaFormat] = tt.format
			}
			if tt.name == "2 with a new figure in a period" {
				p := item[table.AttrPeriods].(*types.AttributeValueMemberM).Value["DAILY#2026-11-27"].(*types.AttributeValueMemberM)
				p.Value["fx"] = table.S("new")
			}
			d, err := table.DecodeRollupDelta(item)
			switch {
			case tt.newer:
				require.Error(t, err)
				assert.True(t, errors.Is(err, table.ErrNewerDeltaFormat), "%v", err)
				assert.Contains(t, err.Error(), "format 2")
			case tt.bad != "":
				require.Error(t, err)
				assert.False(t, errors.Is(err, table.ErrNewerDeltaFormat))
				assert.Contains(t, err.Error(), tt.bad)
			default:
				require.NoError(t, err)
				assert.Equal(t, "BRL", d.Currency)
			}
		})
	}
}
