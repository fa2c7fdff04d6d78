package processor

import (
	"testing"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"

	"github.com/ledger-dev/ledger/table"
)

// TestSecondReview25_TodaysConsumerQuarantinesATombstone: the second review
// of issue 25 (docs/exactly-once.md, "Second review", W-c). Revision 2's
// writer turns a DELETE into a tombstone (the transaction's fields removed,
// deletedAt, version and changes set). Today's consumer takes that MODIFY's
// new image as an invalid transaction, not an absent one: the delta is
// right (the old contribution is subtracted) but the record gets a
// quarantine item, so every delete would be quarantined and alarm until
// the consumers know tombstones. Hence the order: readers (X) before the
// writer's tombstones (W). Takes no table.
func TestSecondReview25_TodaysConsumerQuarantinesATombstone(t *testing.T) {
	old := txnImage("b", "2024-01-02", "x", "INCOME", "5", "food")
	tomb := map[string]ddbtypes.AttributeValue{
		"PK": old["PK"], "SK": old["SK"], "entityType": old["entityType"],
		"deletedAt": table.S("2024-01-03T10:00:00Z"), "version": table.Int(2),
		"changes": table.Int(2), "sig": table.S("00112233445566778899aabbccddeeff"),
	}
	c := classify(&Record{EventID: "ev", EventName: "MODIFY", Keys: keysOf(old), OldImage: old, NewImage: tomb, SequenceNumber: "1"})
	assert.True(t, c.isTxn)
	assert.NotNil(t, c.old, "the old image folds")
	assert.Nil(t, c.new, "the tombstone contributes nothing")
	assert.True(t, c.needsQuarantine(), "today's consumer quarantines the tombstone (invalid: %v)", c.invalid)
	if c.invalid != nil {
		t.Logf("today's classification of a tombstone: %v", c.invalid)
	}
}
