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
//	firstSequenceNumber  S, the run's first record (a run's marker, not an alias)
//	lastEventId      S, the run's last record's event id (a run's marker, not an alias)
//
// Every run's commit also puts the run's end-keyed marker
// (aggregates.RunEndMarkerKey of its last record: RunEndMarkerItem), with
// the same attributes, so that a reader of the stream finds the run by its
// last record once its first is trimmed (docs/exactly-once.md, P). It is
// put without a condition: only the run's claim, in the same transaction,
// decides whether the run commits.

// Attributes of the run marker besides sequenceNumber.
const (
	attrRecordCount = "recordCount"
	// AttrFirstSequenceNumber is a run marker's first record.
	AttrFirstSequenceNumber = "firstSequenceNumber"
	attrLastEventID         = "lastEventId"
	// AttrCounted (BOOL true) marks a run whose commit counted its
	// records into their branches' applied items (docs/exactly-once.md,
	// "The design: counted changes", A); a marker without it is a run of
	// a version before (diagnosis: the fence is on the heads).
	AttrCounted = "counted"
)

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

// RunClaimMarker is the marker a run's commit claims it with
// (RunMarkerItem under its first record firstID), holding also its first
// sequence number and its last record's id lastID, from which
// RunEndMarker makes its end-keyed copy.
func RunClaimMarker(firstID, firstSeq, lastID, lastSeq string, count int, now time.Time, ttl time.Duration) map[string]types.AttributeValue {
	item := RunMarkerItem(firstID, lastSeq, count, now, ttl)
	item[AttrFirstSequenceNumber] = S(firstSeq)
	item[attrLastEventID] = S(lastID)
	return item
}

// RunEndMarker is the end-keyed copy of the run marker claim
// (RunClaimMarker), or false for a marker without the run's first sequence
// number and last record (an alias, or a marker of a version before
// end-keyed markers).
func RunEndMarker(claim map[string]types.AttributeValue) (map[string]types.AttributeValue, bool) {
	first, ok1 := String(claim, AttrFirstSequenceNumber)
	lastID, ok2 := String(claim, attrLastEventID)
	if !ok1 || !ok2 || first == "" || lastID == "" {
		return nil, false
	}
	end := make(map[string]types.AttributeValue, len(claim))
	for name, v := range claim {
		end[name] = v
	}
	for name, v := range Key(aggregates.RunEndMarkerKey(lastID)) {
		end[name] = v
	}
	return end, true
}

// RekeyRunMarker is a copy of the run marker claim under the record
// eventID (a run's claim under the key a version before counted changes
// would have used: processor's commitRef.oldKey), naming the same run's
// end.
func RekeyRunMarker(claim map[string]types.AttributeValue, eventID string) map[string]types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(claim))
	for name, v := range claim {
		out[name] = v
	}
	for name, v := range Key(aggregates.RunMarkerKey(eventID)) {
		out[name] = v
	}
	return out
}

// PutRunEndMarker is the transaction action that puts a run's end-keyed
// marker, unconditionally (its run's claim is the condition).
func PutRunEndMarker(tableName string, end map[string]types.AttributeValue) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(tableName), Item: end}}
}

// RunMarkerSpan reads the first and last sequence numbers of the run a
// marker (either key) names; ok is false for a marker without its first
// (an alias, or one of a version before end-keyed markers).
func RunMarkerSpan(item map[string]types.AttributeValue) (first, last string, ok bool) {
	first, ok1 := String(item, AttrFirstSequenceNumber)
	last, ok2 := String(item, AttrSequenceNumber)
	return first, last, ok1 && ok2
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
