package processor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/handler"
)

// Issue 12, defect 3: records a tumbling window processes more than once
// may arrive out of order (AWS). A window holding [r1, r2, r4] and then
// [r3, r2, r5] (r3 late, r2 twice) must apply each of r1..r5 exactly once:
// the held records are sorted by sequence number and deduplicated by
// eventID, never by "a lower sequence number than one seen before".
func TestTumblingWindow_OutOfOrderRedeliveryAppliesEveryRecordOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
	for _, id := range []string{"1", "2", "3", "4", "5"} {
		_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]ddbtypes.AttributeValue{
			"PK": s("TENANT#t#BRANCH#b#TRANSACTION"), "SK": s("2024-01-01#" + id),
			"entityType": s("TRANSACTION"), "type": s("INCOME"), "amount": &ddbtypes.AttributeValueMemberN{Value: "1"},
			"category": s("food"), "createdAt": s("2024-01-01T10:00:00Z")}})
		require.NoError(t, err)
	}
	shard, recs := e.records(t)
	recs = recs[1:] // the default flags item
	require.Len(t, recs, 5)
	r := func(i int) events.DynamoDBEventRecord {
		l, err := processor.ToLambda(recs[i-1])
		require.NoError(t, err)
		return l
	}
	h, err := handler.New(e.processor(t, nil, nil), handler.Config{Mode: handler.Tumbling, Streams: e.streams})
	require.NoError(t, err)
	invoke := func(batch []events.DynamoDBEventRecord, state map[string]string, final bool) map[string]string {
		ev := events.DynamoDBTimeWindowEvent{
			DynamoDBEvent: events.DynamoDBEvent{Records: batch},
			TimeWindowProperties: events.TimeWindowProperties{
				State: state, ShardID: shard, EventSourceARN: e.streamARN, IsFinalInvokeForWindow: final,
				Window: events.Window{Start: events.RFC3339EpochTime{Time: time.Unix(1700000000, 0)},
					End: events.RFC3339EpochTime{Time: time.Unix(1700000060, 0)}},
			},
		}
		payload, err := json.Marshal(ev)
		require.NoError(t, err)
		out, err := h.Invoke(ctx, payload)
		require.NoError(t, err)
		var resp events.DynamoDBTimeWindowEventResponse
		require.NoError(t, json.Unmarshal(out, &resp))
		require.Empty(t, resp.BatchItemFailures)
		return resp.State
	}
	state := invoke([]events.DynamoDBEventRecord{r(1), r(2), r(4)}, nil, false)
	state = invoke([]events.DynamoDBEventRecord{r(3), r(2), r(5)}, state, true)
	assert.Empty(t, state)
	diffs, _, err := reconcileBranch(ctx, e, "t", "b")
	require.NoError(t, err)
	assert.Empty(t, diffs, "every record applied once: %v", diffs)
}
