package processor

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// Record is one DynamoDB stream record, whichever source it came from: a
// Lambda event (FromLambda) or the DynamoDB Streams API (FromStream).
// Everything after decoding (validation, folding, the commit) works on Record
// only, so the Lambda, the poller and fixture replay share one code path.
type Record struct {
	EventID        string // unique per record; keys quarantine items and run markers
	EventName      string // INSERT, MODIFY or REMOVE
	SequenceNumber string // position in its shard; numeric, compare with CompareSequence
	StreamARN      string
	StreamViewType string
	// ApproximateCreation is when DynamoDB wrote the record (seconds on AWS,
	// rounded to the minute by DynamoDB Local); zero when unknown.
	ApproximateCreation time.Time
	SizeBytes           int64

	Keys, OldImage, NewImage map[string]ddbtypes.AttributeValue

	// ByTTL: the record's userIdentity is DynamoDB's TTL service (type
	// Service, principal dynamodb.amazonaws.com): a REMOVE made by a TTL
	// deletion, never a compaction's (docs/exactly-once.md, the second
	// review of issue 25, C-b).
	ByTTL bool

	// DecodeErr is set when the record could not be decoded completely; such a
	// record is quarantined, never applied.
	DecodeErr error
}

// FromLambda converts a record of a Lambda DynamoDB stream event. It never
// panics and never calls an aws-lambda-go accessor: the images are
// re-encoded to their wire JSON and decoded with the SDK's own attribute
// value decoder. A record whose images cannot be decoded is returned with
// DecodeErr set, so that it is quarantined rather than lost.
func FromLambda(r events.DynamoDBEventRecord) Record {
	rec := Record{
		EventID:        r.EventID,
		EventName:      r.EventName,
		SequenceNumber: r.Change.SequenceNumber,
		StreamARN:      r.EventSourceArn,
		StreamViewType: r.Change.StreamViewType,
		SizeBytes:      r.Change.SizeBytes,
	}
	if u := r.UserIdentity; u != nil {
		rec.ByTTL = IsTTLIdentity(u.Type, u.PrincipalID)
	}
	if t := r.Change.ApproximateCreationDateTime.Time; !t.IsZero() && t.Unix() > 0 {
		rec.ApproximateCreation = t.UTC()
	}
	var err error
	if rec.Keys, err = lambdaImage(r.Change.Keys); err != nil {
		rec.DecodeErr = fmt.Errorf("keys: %w", err)
	}
	if rec.OldImage, err = lambdaImage(r.Change.OldImage); err != nil && rec.DecodeErr == nil {
		rec.DecodeErr = fmt.Errorf("old image: %w", err)
	}
	if rec.NewImage, err = lambdaImage(r.Change.NewImage); err != nil && rec.DecodeErr == nil {
		rec.DecodeErr = fmt.Errorf("new image: %w", err)
	}
	return rec
}

func lambdaImage(img map[string]events.DynamoDBAttributeValue) (m map[string]ddbtypes.AttributeValue, err error) {
	if img == nil {
		return nil, nil
	}
	defer func() {
		// events.DynamoDBAttributeValue.MarshalJSON does not panic today; a
		// future version that did must still not take the consumer down.
		if p := recover(); p != nil {
			m, err = nil, fmt.Errorf("encode attribute values: %v", p)
		}
	}()
	raw, err := json.Marshal(img)
	if err != nil {
		return nil, fmt.Errorf("encode attribute values: %w", err)
	}
	return attributevalue.UnmarshalMapJSON(raw)
}

// FromStream converts a record read with the DynamoDB Streams API. streamARN
// names the stream it was read from (the API's records do not carry it).
func FromStream(r streamtypes.Record, streamARN string) Record {
	rec := Record{StreamARN: streamARN}
	if r.EventID != nil {
		rec.EventID = *r.EventID
	}
	rec.EventName = string(r.EventName)
	if u := r.UserIdentity; u != nil {
		rec.ByTTL = IsTTLIdentity(aws.ToString(u.Type), aws.ToString(u.PrincipalId))
	}
	sr := r.Dynamodb
	if sr == nil {
		rec.DecodeErr = fmt.Errorf("record %s has no dynamodb section", rec.EventID)
		return rec
	}
	if sr.SequenceNumber != nil {
		rec.SequenceNumber = *sr.SequenceNumber
	}
	rec.StreamViewType = string(sr.StreamViewType)
	if sr.SizeBytes != nil {
		rec.SizeBytes = *sr.SizeBytes
	}
	if sr.ApproximateCreationDateTime != nil {
		rec.ApproximateCreation = sr.ApproximateCreationDateTime.UTC()
	}
	var err error
	if rec.Keys, err = streamImage(sr.Keys); err != nil {
		rec.DecodeErr = fmt.Errorf("keys: %w", err)
	}
	if rec.OldImage, err = streamImage(sr.OldImage); err != nil && rec.DecodeErr == nil {
		rec.DecodeErr = fmt.Errorf("old image: %w", err)
	}
	if rec.NewImage, err = streamImage(sr.NewImage); err != nil && rec.DecodeErr == nil {
		rec.DecodeErr = fmt.Errorf("new image: %w", err)
	}
	return rec
}

func streamImage(img map[string]streamtypes.AttributeValue) (map[string]ddbtypes.AttributeValue, error) {
	if img == nil {
		return nil, nil
	}
	for name, v := range img {
		if v == nil {
			// The SDK's stream decoder yields nil for attributes it could not
			// read (DynamoDB Local's untyped empty map, for one).
			return nil, fmt.Errorf("attribute %q has no value", name)
		}
	}
	return attributevalue.FromDynamoDBStreamsMap(img)
}

// ToLambda converts r back to the Lambda event shape: the form in which
// records are quarantined, recorded as fixtures and replayed.
func ToLambda(r Record) (events.DynamoDBEventRecord, error) {
	out := events.DynamoDBEventRecord{
		EventID:        r.EventID,
		EventName:      r.EventName,
		EventVersion:   "1.1",
		EventSource:    "aws:dynamodb",
		EventSourceArn: r.StreamARN,
		Change: events.DynamoDBStreamRecord{
			SequenceNumber: r.SequenceNumber,
			SizeBytes:      r.SizeBytes,
			StreamViewType: r.StreamViewType,
		},
	}
	if region := arnRegion(r.StreamARN); region != "" {
		out.AWSRegion = region
	}
	if r.ByTTL {
		out.UserIdentity = &events.DynamoDBUserIdentity{Type: ttlIdentityType, PrincipalID: ttlPrincipal}
	}
	if !r.ApproximateCreation.IsZero() {
		out.Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: r.ApproximateCreation}
	}
	var err error
	if out.Change.Keys, err = toLambdaImage(r.Keys); err != nil {
		return out, fmt.Errorf("keys: %w", err)
	}
	if out.Change.OldImage, err = toLambdaImage(r.OldImage); err != nil {
		return out, fmt.Errorf("old image: %w", err)
	}
	if out.Change.NewImage, err = toLambdaImage(r.NewImage); err != nil {
		return out, fmt.Errorf("new image: %w", err)
	}
	return out, nil
}

func toLambdaImage(img map[string]ddbtypes.AttributeValue) (map[string]events.DynamoDBAttributeValue, error) {
	if img == nil {
		return nil, nil
	}
	raw, err := attributevalue.MarshalMapJSON(img)
	if err != nil {
		return nil, err
	}
	var out map[string]events.DynamoDBAttributeValue
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func arnRegion(arn string) string {
	parts := strings.SplitN(arn, ":", 5)
	if len(parts) < 5 {
		return ""
	}
	return parts[3]
}

// The userIdentity of a record made by a TTL deletion (AWS, DynamoDB
// Streams API reference, "Identity"; Lambda's event carries the same).
const (
	ttlIdentityType = "Service"
	ttlPrincipal    = "dynamodb.amazonaws.com"
)

func IsTTLIdentity(typ, principal string) bool {
	return typ == ttlIdentityType && principal == ttlPrincipal
}

// CompareSequence compares two stream sequence numbers as numbers (they are
// decimal strings of varying width; DynamoDB Local pads them to 21 digits,
// AWS does not). It returns −1, 0 or +1.
func CompareSequence(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return strings.Compare(a, b)
}
