package aggregates

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseTransaction_RefusesABusinessDateItsCreatedAtCannotHave: a
// stamp's periods are checked against its business date, and the business
// date must be one the transaction's createdAt can have in some calendar:
// from two days before its UTC date to the day after (business date D's
// transactions have UTC dates D−1 to D+2, the bound the writer's listing by
// business date reads). A stamp written by another path with a business
// date elsewhere (2020-01-01 for a transaction of 2024-02-29) was counted
// in that date's reports, where a listing of that business date never
// finds it.
func TestParseTransaction_RefusesABusinessDateItsCreatedAtCannotHave(t *testing.T) {
	tests := []struct {
		date, periods string
		ok            bool
	}{
		{"2024-02-27", "DAILY#2024-02-27 MONTHLY#2024-02 YEARLY#2024", true},
		{"2024-03-01", "DAILY#2024-03-01 MONTHLY#2024-03 YEARLY#2024", true},
		{"2024-02-26", "DAILY#2024-02-26 MONTHLY#2024-02 YEARLY#2024", false},
		{"2024-03-02", "DAILY#2024-03-02 MONTHLY#2024-03 YEARLY#2024", false},
		{"2020-01-01", "DAILY#2020-01-01 MONTHLY#2020-01 YEARLY#2020", false},
		{"9999-12-31", "YEARLY#9999", false},
	}
	for _, tt := range tests {
		t.Run(tt.date, func(t *testing.T) {
			_, err := ParseTransaction(image(map[string]Attr{AttrBusinessDate: {"S", tt.date}, AttrPeriods: {"S", tt.periods}}))
			if tt.ok {
				require.NoError(t, err)
				return
			}
			var inv *InvalidError
			require.ErrorAs(t, err, &inv)
			assert.Equal(t, ReasonPeriods, inv.Reason)
		})
	}
}
