package table

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file is the quarantine item's layout: a stream record the consumers
// refused for good (an invalid transaction image, a record that does not
// decode), kept under aggregates.QuarantineKey and listed through GSI1
// (aggregates.QuarantineIndexPK, oldest first). Under its key it holds
//
//	entityType               QUARANTINE
//	GSI1PK, GSI1SK           QUARANTINE, quarantinedAt#eventID
//	eventID, eventName       S
//	sequenceNumber           S
//	streamArn                S
//	reason, detail           S, the aggregates.InvalidError's
//	field                    S, the field it names, when it names one
//	quarantinedAt            S, RFC 3339
//	record                   S, the record as Lambda event JSON; only its
//	                         keys when truncated
//	truncated, recordBytes   BOOL, N: the record was too large to keep

// Attribute names of the quarantine item.
const (
	attrEventID   = "eventID"
	attrEventName = "eventName"
	attrStreamARN = "streamArn"
	attrReason    = "reason"
	attrDetail    = "detail"
	attrField     = "field"
	// AttrQuarantinedAt is when the item was written: a commit recognises
	// its own quarantine items by it after a lost answer.
	AttrQuarantinedAt = "quarantinedAt"
	attrRecord        = "record"
	attrTruncated     = "truncated"
	attrRecordBytes   = "recordBytes"
)

// Quarantined describes a quarantined record.
type Quarantined struct {
	ID                                 string // recordID: keys the item
	EventID, EventName, SequenceNumber string
	StreamARN                          string
	Reason, Detail, Field              string
	At                                 string // RFC 3339
	// Record is the record's JSON, or only its keys when Truncated, of
	// RecordBytes bytes whole.
	Record      string
	Truncated   bool
	RecordBytes int
}

// QuarantineItem is the quarantine item of q.
func QuarantineItem(q Quarantined) map[string]types.AttributeValue {
	item := Key(aggregates.QuarantineKey(q.ID))
	item[AttrEntityType] = S(aggregates.EntityQuarantine)
	item[AttrGSI1PK] = S(aggregates.QuarantineIndexPK)
	item[AttrGSI1SK] = S(q.At + "#" + q.EventID)
	item[attrEventID] = S(q.EventID)
	item[attrEventName] = S(q.EventName)
	item[AttrSequenceNumber] = S(q.SequenceNumber)
	item[attrStreamARN] = S(q.StreamARN)
	item[attrReason] = S(q.Reason)
	item[attrDetail] = S(q.Detail)
	if q.Field != "" {
		item[attrField] = S(q.Field)
	}
	item[AttrQuarantinedAt] = S(q.At)
	if q.Truncated {
		item[attrTruncated] = Bool(true)
		item[attrRecordBytes] = Int(int64(q.RecordBytes))
	}
	item[attrRecord] = S(q.Record)
	return item
}

// PutQuarantine is the put of a quarantine item, only if it is not there
// yet: a redelivered record's put fails its condition, which counts as
// done. It asks for the consumed capacity.
func PutQuarantine(tableName string, item map[string]types.AttributeValue) *dynamodb.PutItemInput {
	return &dynamodb.PutItemInput{
		TableName: aws.String(tableName), Item: item, ConditionExpression: aws.String("attribute_not_exists(PK)"),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	}
}

// QuarantineTruncated reports whether a quarantine item keeps only its
// record's keys.
func QuarantineTruncated(item map[string]types.AttributeValue) bool {
	_, ok := item[attrTruncated]
	return ok
}
