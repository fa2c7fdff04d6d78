package bench

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
)

// WriteAPI is the part of DynamoDB the peer approaches write with.
type WriteAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// PerRecord is the stream handler most users write first: for every record,
// seed 003's report updates, one request at a time (approach 1). With
// Idempotent it first claims the record with a Powertools-style
// idempotency marker (approach 2).
//
// Approach 1, per record and per report the record's delta touches (the
// delta is new − old, so modifies and deletes are handled as well):
//
//   - updateCounters: SET totalIncome = if_not_exists(totalIncome, :zero) +
//     :incomeAmount, the same for totalExpense and transactionCount — as the
//     seed writes it — and, so that the breakdown steps can address entries,
//     byX = if_not_exists(byX, :emptyMap) for every breakdown the delta
//     names (the seed leaves out where the maps come from; this is the
//     least it needs);
//   - for every breakdown entry, the seed's two steps: SET byX.#k =
//     if_not_exists(byX.#k, :defaultEntry), then SET byX.#k.totalIncome =
//     byX.#k.totalIncome + :incomeAmount (and the two other fields).
//
// It is not idempotent: a record delivered twice is counted twice.
//
// Approach 2 wraps every record as Powertools for AWS Lambda's idempotency
// utility does: a conditional PutItem of a marker (status INPROGRESS,
// expiration = now + 1 h as TTL, in_progress_expiration = now + the
// invocation's remaining time) with attribute_not_exists(id) OR
// expiration < :now OR (status = INPROGRESS AND in_progress_expiration <
// :now_ms); a failed condition means the record was processed (COMPLETED:
// skipped) or is being processed (INPROGRESS: the record fails, to be
// retried); then approach 1's updates; then an UpdateItem of the marker to
// status COMPLETED with the (empty) result. The idempotency key is a hash
// of the record's eventID.
type PerRecord struct {
	API        WriteAPI
	Table      string
	Idempotent bool
	// Applied, when set, is called after a record's updates landed (not for
	// records without effect or skipped as already processed).
	Applied func(r processor.Record, at time.Time)
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// ErrInProgress fails a record whose idempotency marker says another
// invocation is processing it.
var ErrInProgress = errors.New("idempotency record is in progress")

// Invoke handles one Lambda DynamoDB stream event (the raw JSON, decoded
// with encoding/json into events.DynamoDBEvent) and answers with the
// records that failed, as ReportBatchItemFailures expects: the first record
// that failed and everything after it is redelivered.
func (h *PerRecord) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, fmt.Errorf("decode event: %w", err)
	}
	resp := events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{}}
	for _, r := range ev.Records {
		if err := h.record(ctx, processor.FromLambda(r)); err != nil {
			if !errors.Is(err, ErrInProgress) && ctx.Err() == nil {
				return nil, err
			}
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: r.Change.SequenceNumber})
			break
		}
	}
	return json.Marshal(resp)
}

func (h *PerRecord) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h *PerRecord) record(ctx context.Context, r processor.Record) error {
	old, new := processor.Transactions(r)
	if old == nil && new == nil {
		return nil // not a transaction (the reports' own writes, markers, …)
	}
	if h.Idempotent {
		done, err := h.claim(ctx, r)
		if err != nil || done {
			return err
		}
	}
	f := aggregates.NewFold()
	f.AddChange(old, new)
	for _, k := range f.Keys() {
		if err := h.updateReport(ctx, k, f.Report(k)); err != nil {
			return err
		}
	}
	if h.Idempotent {
		if err := h.complete(ctx, r); err != nil {
			return err
		}
	}
	if h.Applied != nil {
		h.Applied(r, h.now())
	}
	return nil
}

func reportKeyAV(k aggregates.ReportKey) map[string]ddbtypes.AttributeValue {
	key := k.Key()
	return map[string]ddbtypes.AttributeValue{"PK": sAV(key.PK), "SK": sAV(key.SK)}
}

func totalsValues(t aggregates.Totals) (income, expense, count ddbtypes.AttributeValue) {
	return nAV(t.Income.String()), nAV(t.Expense.String()), nAV(strconv.FormatInt(t.Count, 10))
}

// updateReport is updateCounters plus the two-step update of every
// breakdown entry, one request each.
func (h *PerRecord) updateReport(ctx context.Context, k aggregates.ReportKey, d *aggregates.Report) error {
	inc, exp, cnt := totalsValues(d.Totals)
	names := map[string]string{"#totalIncome": "totalIncome", "#totalExpense": "totalExpense", "#transactionCount": "transactionCount"}
	values := map[string]ddbtypes.AttributeValue{":zero": nAV("0"), ":incomeAmount": inc, ":expenseAmount": exp, ":countDelta": cnt}
	expr := "SET #totalIncome = if_not_exists(#totalIncome, :zero) + :incomeAmount, " +
		"#totalExpense = if_not_exists(#totalExpense, :zero) + :expenseAmount, " +
		"#transactionCount = if_not_exists(#transactionCount, :zero) + :countDelta"
	for _, dim := range aggregates.Dimensions {
		if len(d.Breakdowns[dim]) == 0 {
			continue
		}
		ph := "#" + dim.Attribute()
		names[ph] = dim.Attribute()
		values[":emptyMap"] = &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{}}
		expr += ", " + ph + " = if_not_exists(" + ph + ", :emptyMap)"
	}
	if _, err := h.API.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &h.Table, Key: reportKeyAV(k), UpdateExpression: &expr,
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}); err != nil {
		return fmt.Errorf("update counters of %s: %w", k, err)
	}
	for _, dim := range aggregates.Dimensions {
		for name, t := range d.Breakdowns[dim] {
			if err := h.updateEntry(ctx, k, dim, name, t); err != nil {
				return err
			}
		}
	}
	return nil
}

func (h *PerRecord) updateEntry(ctx context.Context, k aggregates.ReportKey, dim aggregates.Dimension, name string, t aggregates.Totals) error {
	names := map[string]string{"#breakdown": dim.Attribute(), "#entryKey": name}
	// Step 1: ensure the entry exists with default values.
	_, err := h.API.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &h.Table, Key: reportKeyAV(k),
		UpdateExpression:         aws.String("SET #breakdown.#entryKey = if_not_exists(#breakdown.#entryKey, :defaultEntry)"),
		ExpressionAttributeNames: names,
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":defaultEntry": &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{
			"totalIncome": nAV("0"), "totalExpense": nAV("0"), "transactionCount": nAV("0"),
		}}},
	})
	if err != nil {
		return fmt.Errorf("initialise %s[%q] of %s: %w", dim, name, k, err)
	}
	// Step 2: increment the values.
	inc, exp, cnt := totalsValues(t)
	names["#totalIncome"], names["#totalExpense"], names["#transactionCount"] = "totalIncome", "totalExpense", "transactionCount"
	_, err = h.API.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &h.Table, Key: reportKeyAV(k),
		UpdateExpression: aws.String("SET #breakdown.#entryKey.#totalIncome = #breakdown.#entryKey.#totalIncome + :incomeAmount, " +
			"#breakdown.#entryKey.#totalExpense = #breakdown.#entryKey.#totalExpense + :expenseAmount, " +
			"#breakdown.#entryKey.#transactionCount = #breakdown.#entryKey.#transactionCount + :countDelta"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":incomeAmount": inc, ":expenseAmount": exp, ":countDelta": cnt},
	})
	if err != nil {
		return fmt.Errorf("increment %s[%q] of %s: %w", dim, name, k, err)
	}
	return nil
}

// Powertools' persistence layer defaults.
const (
	idempotencyTTL      = time.Hour
	idempotencyFunction = "ledger-bench.record_handler"
	inProgressWindow    = 60 * time.Second // the invocation's remaining time
)

func (h *PerRecord) idempotencyKey(r processor.Record) map[string]ddbtypes.AttributeValue {
	sum := md5.Sum([]byte(r.EventID))
	return map[string]ddbtypes.AttributeValue{
		"PK": sAV("POWERTOOLS#" + idempotencyFunction + "#" + hex.EncodeToString(sum[:])),
		"SK": sAV("IDEMPOTENCY"),
	}
}

// claim puts the record's INPROGRESS marker. done reports a record already
// processed.
func (h *PerRecord) claim(ctx context.Context, r processor.Record) (done bool, err error) {
	now := h.now()
	item := h.idempotencyKey(r)
	item["status"] = sAV("INPROGRESS")
	item["expiration"] = nAV(strconv.FormatInt(now.Add(idempotencyTTL).Unix(), 10))
	item["in_progress_expiration"] = nAV(strconv.FormatInt(now.Add(inProgressWindow).UnixMilli(), 10))
	_, err = h.API.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &h.Table, Item: item,
		ConditionExpression: aws.String("attribute_not_exists(#id) OR #expiry < :now OR " +
			"(#status = :inprogress AND attribute_exists(#in_progress_expiry) AND #in_progress_expiry < :now_in_millis)"),
		ExpressionAttributeNames: map[string]string{"#id": "PK", "#expiry": "expiration", "#status": "status", "#in_progress_expiry": "in_progress_expiration"},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":now": nAV(strconv.FormatInt(now.Unix(), 10)), ":now_in_millis": nAV(strconv.FormatInt(now.UnixMilli(), 10)),
			":inprogress": sAV("INPROGRESS"),
		},
		ReturnValuesOnConditionCheckFailure: ddbtypes.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *ddbtypes.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		existing := ccf.Item
		if existing == nil { // an older DynamoDB without ReturnValuesOnConditionCheckFailure: read it
			out, gerr := h.API.GetItem(ctx, &dynamodb.GetItemInput{TableName: &h.Table, Key: h.idempotencyKey(r), ConsistentRead: aws.Bool(true)})
			if gerr != nil {
				return false, fmt.Errorf("read idempotency record of %s: %w", r.EventID, gerr)
			}
			existing = out.Item
		}
		if str(existing["status"]) == "COMPLETED" {
			return true, nil
		}
		return false, fmt.Errorf("record %s: %w", r.EventID, ErrInProgress)
	}
	if err != nil {
		return false, fmt.Errorf("claim record %s: %w", r.EventID, err)
	}
	return false, nil
}

func (h *PerRecord) complete(ctx context.Context, r processor.Record) error {
	_, err := h.API.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &h.Table, Key: h.idempotencyKey(r),
		UpdateExpression:         aws.String("SET #response_data = :response_data, #expiry = :expiry, #status = :status"),
		ExpressionAttributeNames: map[string]string{"#response_data": "data", "#expiry": "expiration", "#status": "status"},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":response_data": sAV("null"), ":expiry": nAV(strconv.FormatInt(h.now().Add(idempotencyTTL).Unix(), 10)),
			":status": sAV("COMPLETED"),
		},
	})
	if err != nil {
		return fmt.Errorf("complete record %s: %w", r.EventID, err)
	}
	return nil
}
