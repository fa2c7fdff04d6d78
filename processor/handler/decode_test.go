package handler_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/handler"
)

type fixture struct {
	name  string
	raw   []byte
	event events.DynamoDBEvent
}

func loadFixtures(t testing.TB) []fixture {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "fixtures", "events", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	var out []fixture
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		require.NoError(t, err)
		f := fixture{name: strings.TrimSuffix(filepath.Base(p), ".json"), raw: raw}
		require.NoError(t, json.Unmarshal(raw, &f.event), p)
		out = append(out, f)
	}
	return out
}

func TestDecodeEvent_FixturesGiveTheRecordsOfFromLambda(t *testing.T) {
	for _, f := range loadFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			ev, err := handler.DecodeEvent(f.raw)
			require.NoError(t, err)
			assert.Nil(t, ev.Window)
			require.Len(t, ev.Records, len(f.event.Records))
			for i, r := range f.event.Records {
				want := processor.FromLambda(r)
				assert.Equal(t, want, ev.Records[i], "record %d (%s): DecodeEvent (got) differs from FromLambda (want)", i, r.EventID)
			}
		})
	}
}

func TestDecodeEvent_TumblingWindowProperties(t *testing.T) {
	raw := `{"Records":[],"window":{"start":"2020-07-30T17:00:00Z","end":"2020-07-30T17:05:00Z"},
		"state":{"a":"b"},"shardId":"shard-1","eventSourceARN":"arn:stream","isFinalInvokeForWindow":true,"isWindowTerminatedEarly":false}`
	ev, err := handler.DecodeEvent([]byte(raw))
	require.NoError(t, err)
	require.NotNil(t, ev.Window)
	assert.Equal(t, handler.Window{
		Start: time.Date(2020, 7, 30, 17, 0, 0, 0, time.UTC), End: time.Date(2020, 7, 30, 17, 5, 0, 0, time.UTC),
		State: map[string]string{"a": "b"}, ShardID: "shard-1", EventSourceARN: "arn:stream", Final: true,
	}, *ev.Window)
	assert.Empty(t, ev.Records)
}

// A record template; %s are replaced by the tests.
const goodRecord = `{"eventID":"e1","eventName":"INSERT","eventSourceARN":"arn:s","dynamodb":{"ApproximateCreationDateTime":1700000000,
	"Keys":{"PK":{"S":"TENANT#t#BRANCH#b#TRANSACTION"},"SK":{"S":"2024-01-01#x"}},
	"NewImage":{"PK":{"S":"TENANT#t#BRANCH#b#TRANSACTION"},"SK":{"S":"2024-01-01#x"},"amount":{"N":"1.5"}},
	"SequenceNumber":"100","SizeBytes":10,"StreamViewType":"NEW_AND_OLD_IMAGES"}}`

func TestDecodeEvent_BrokenRecordsAreMarkedNotFatal(t *testing.T) {
	tests := []struct {
		name    string
		record  string
		wantErr string // in the record's DecodeErr
		keys    bool   // keys still decoded
		image   bool   // new image still decoded
	}{
		{"value without type (DynamoDB Local's empty map)", strings.Replace(goodRecord, `"amount":{"N":"1.5"}`, `"amount":{}`, 1), `new image: attribute "amount" has no value`, true, false},
		{"null value", strings.Replace(goodRecord, `"amount":{"N":"1.5"}`, `"amount":{"S":null}`, 1), `attribute "amount" has no value`, true, false},
		{"unknown type", strings.Replace(goodRecord, `"amount":{"N":"1.5"}`, `"amount":{"X":"1"}`, 1), `attribute "amount" has unknown type "X"`, true, false},
		{"number as JSON number", strings.Replace(goodRecord, `"amount":{"N":"1.5"}`, `"amount":{"N":1.5}`, 1), `new image: expected NumberAttributeValue`, true, false},
		{"nested empty value", strings.Replace(goodRecord, `"amount":{"N":"1.5"}`, `"m":{"M":{"a":{"L":[{"S":"x"},{}]}}}`, 1), `attribute "m.a[1]" has no value`, true, false},
		{"image not a map", strings.Replace(goodRecord, `"NewImage":{`, `"NewImage":["x"],"Ignored":{`, 1), `new image:`, true, false},
		{"keys broken", strings.Replace(goodRecord, `"Keys":{"PK":{"S":"TENANT#t#BRANCH#b#TRANSACTION"}`, `"Keys":{"PK":{"S":7}`, 1), `keys: expected StringAttributeValue`, false, true},
		{"sequence number of the wrong type", strings.Replace(goodRecord, `"SequenceNumber":"100"`, `"SequenceNumber":100`, 1), `record 1: json: cannot unmarshal number`, true, true},
		{"creation time of the wrong type", strings.Replace(goodRecord, `1700000000`, `"yesterday"`, 1), `approximate creation time:`, true, true},
		{"dynamodb section not an object", `{"eventID":"e1","eventName":"INSERT","dynamodb":"oops"}`, `record 1: json: cannot unmarshal string`, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload := `{"Records":[` + goodRecord + `,` + tt.record + `,` + strings.Replace(goodRecord, `"e1"`, `"e3"`, 1) + `]}`
			ev, err := handler.DecodeEvent([]byte(payload))
			require.NoError(t, err)
			require.Len(t, ev.Records, 3)
			assert.NoError(t, ev.Records[0].DecodeErr)
			assert.NoError(t, ev.Records[2].DecodeErr)
			assert.Equal(t, "e3", ev.Records[2].EventID)
			bad := ev.Records[1]
			require.Error(t, bad.DecodeErr)
			assert.Contains(t, bad.DecodeErr.Error(), tt.wantErr)
			assert.Equal(t, "e1", bad.EventID)
			assert.Equal(t, tt.keys, bad.Keys != nil, "keys decoded")
			assert.Equal(t, tt.image, bad.NewImage != nil, "new image decoded")
		})
	}
}

func TestDecodeEvent_RecordWithoutEventIDGetsAStableID(t *testing.T) {
	rec := strings.Replace(goodRecord, `"eventID":"e1",`, ``, 1)
	ev, err := handler.DecodeEvent([]byte(`{"Records":[` + rec + `]}`))
	require.NoError(t, err)
	assert.Equal(t, "seq-100", ev.Records[0].EventID)
	assert.ErrorContains(t, ev.Records[0].DecodeErr, "no eventID")

	rec = strings.Replace(rec, `"SequenceNumber":"100",`, ``, 1)
	a, err := handler.DecodeEvent([]byte(`{"Records":[` + rec + `]}`))
	require.NoError(t, err)
	b, err := handler.DecodeEvent([]byte(`{"Records":[` + rec + `]}`))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(a.Records[0].EventID, "sha256-"), a.Records[0].EventID)
	assert.Equal(t, a.Records[0].EventID, b.Records[0].EventID, "the same record must get the same id on every delivery")
}

func TestDecodeEvent_FailsOnlyWhenNothingIsIdentifiable(t *testing.T) {
	for _, payload := range []string{``, `garbage`, `{"Records":[`, `[]`, `"x"`, `{"Records":"x"}`, `{"Records":[],"shardId":5}`} {
		_, err := handler.DecodeEvent([]byte(payload))
		assert.Error(t, err, "payload %q", payload)
	}
	ev, err := handler.DecodeEvent([]byte(`{}`))
	require.NoError(t, err)
	assert.Empty(t, ev.Records)
	ev, err = handler.DecodeEvent([]byte(`{"Records":[{}, 5]}`))
	require.NoError(t, err)
	require.Len(t, ev.Records, 2)
	for _, r := range ev.Records {
		assert.Error(t, r.DecodeErr)
		assert.NotEmpty(t, r.EventID)
	}
}

func TestDecodeEvent_EmptyAndNullImages(t *testing.T) {
	rec := strings.Replace(goodRecord, `"NewImage":{"PK":{"S":"TENANT#t#BRANCH#b#TRANSACTION"},"SK":{"S":"2024-01-01#x"},"amount":{"N":"1.5"}}`, `"NewImage":{},"OldImage":null`, 1)
	ev, err := handler.DecodeEvent([]byte(`{"Records":[` + rec + `]}`))
	require.NoError(t, err)
	r := ev.Records[0]
	require.NoError(t, r.DecodeErr)
	assert.Equal(t, map[string]ddbtypes.AttributeValue{}, r.NewImage)
	assert.Nil(t, r.OldImage)

	var lambdaEv events.DynamoDBEvent
	require.NoError(t, json.Unmarshal([]byte(`{"Records":[`+rec+`]}`), &lambdaEv))
	assert.Equal(t, processor.FromLambda(lambdaEv.Records[0]), r)
}
