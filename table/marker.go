package table

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file is the run marker's layout: the guard of the standard-mode
// Lambda (processor.MarkerGuard), keyed by a run's first record
// (aggregates.RunMarkerKey), put only if absent inside the run's commit.
// Under its key it holds
//
//	entityType       RUN_MARKER
//	sequenceNumber   S, the run's last record
//	recordCount      N, the run's records (0: an alias pointing at a run's end)
//	updatedAt        S, RFC 3339
//	expiresAt        N, epoch seconds: TTL, when the stream no longer holds the run

// attrRecordCount is the run marker's number of records.
const attrRecordCount = "recordCount"

// RunMarkerItem is the run marker of the run starting at record eventID and
// ending at lastSeq, of count records, written at now and expiring after ttl.
func RunMarkerItem(eventID, lastSeq string, count int, now time.Time, ttl time.Duration) map[string]types.AttributeValue {
	item := Key(aggregates.RunMarkerKey(eventID))
	item[AttrEntityType] = S(aggregates.EntityRunMarker)
	item[AttrSequenceNumber] = S(lastSeq)
	item[attrRecordCount] = Int(int64(count))
	item[AttrUpdatedAt] = S(now.Format(time.RFC3339Nano))
	item[AttrExpiresAt] = Int(now.Add(ttl).Unix())
	return item
}

// ClaimRunMarker is the transaction action that claims a run by putting its
// marker (RunMarkerItem) only if no marker is there.
func ClaimRunMarker(tableName string, marker map[string]types.AttributeValue) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{
		TableName:           aws.String(tableName),
		Item:                marker,
		ConditionExpression: aws.String("attribute_not_exists(" + AttrPK + ")"),
	}}
}

// RunMarkerEnd reads the last sequence number of a run marker; ok is
// false for a marker without one.
func RunMarkerEnd(item map[string]types.AttributeValue) (last string, ok bool) {
	return String(item, AttrSequenceNumber)
}
