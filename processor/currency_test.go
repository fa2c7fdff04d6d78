package processor_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
)

// TestTransactions_RecordedRecordsCarryTheirBranchCurrency reads the
// records DynamoDB Local recorded of transactions carrying the currency
// attribute (fixtures/events/currency.json, issue 24): the consumers accept
// them, with their currency, as they accept transactions without one; a
// currency that is not a code makes its image invalid (it is quarantined,
// reason currency: the replay of the fixture and its golden show that).
func TestTransactions_RecordedRecordsCarryTheirBranchCurrency(t *testing.T) {
	raw, err := os.ReadFile("../fixtures/events/currency.json")
	require.NoError(t, err)
	var ev events.DynamoDBEvent
	require.NoError(t, json.Unmarshal(raw, &ev))
	type sides struct{ old, new string } // "-" for no valid image
	want := []sides{
		{"-", "BRL"}, {"-", "BRL"}, {"-", "JPY"}, {"-", "BHD"}, {"-", ""}, // inserts
		{"BRL", "BRL"},                     // the amount changed
		{"", "EUR"},                        // a currency set by another path
		{"-", "-"}, {"-", "-"}, {"-", "-"}, // lower case, unknown, a number
		{"-", "BRL"}, // the lower-case one fixed
	}
	require.Len(t, ev.Records, len(want))
	show := func(tx *aggregates.Transaction) string {
		if tx == nil {
			return "-"
		}
		return tx.Currency
	}
	for i, r := range ev.Records {
		old, nw := processor.Transactions(processor.FromLambda(r))
		assert.Equal(t, want[i], sides{show(old), show(nw)}, "record %d (%s %s)", i, r.EventName, r.Change.Keys["SK"].String())
	}
}
