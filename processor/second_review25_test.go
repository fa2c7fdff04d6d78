package processor

import (
	"testing"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"

	"github.com/ledger-dev/ledger/table"
)

// TestSecondReview25_ATombstoneIsAbsentNotQuarantined: the second review
// of issue 25 (docs/exactly-once.md, "Second review", W-c) showed that the
// consumer of its day took a tombstone's MODIFY (the transaction's fields
// removed, deletedAt, version and changes set) for an invalid transaction:
// the delta was right but every delete would get a quarantine item. The
// readers now know tombstones (aggregates.ErrDeleted): the old image
// folds, the tombstone contributes nothing, and nothing is quarantined
// (it asserted needsQuarantine until then). Takes no table.
func TestSecondReview25_ATombstoneIsAbsentNotQuarantined(t *testing.T) {
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
	assert.Nil(t, c.invalid, "a tombstone is absent, not invalid")
	assert.False(t, c.needsQuarantine(), "nothing quarantined")
}
