package poller_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
)

// emptyMapBody is a GetRecords answer recorded from DynamoDB Local
// (table/streamquirks_test.go): its second record's NewImage has m = {} and
// n.inner = {}, untagged.
const emptyMapBody = "../../table/testdata/getrecords_empty_map.json"

// streamsServer answers every Streams call with body.
func streamsServer(t *testing.T, body []byte) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func getRecords(t *testing.T, c *dynamodbstreams.Client) *dynamodbstreams.GetRecordsOutput {
	t.Helper()
	out, err := c.GetRecords(context.Background(), &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String("it")})
	require.NoError(t, err)
	require.Len(t, out.Records, 2)
	return out
}

func TestNewStreamsClient_RepairsUntaggedEmptyMapsFromDynamoDBLocal(t *testing.T) {
	body, err := os.ReadFile(emptyMapBody)
	require.NoError(t, err)
	endpoint := streamsServer(t, body)
	cfg, err := infra.LocalConfig(context.Background(), endpoint)
	require.NoError(t, err)

	// Without the repair the SDK turns m into something else, silently.
	plain := getRecords(t, dynamodbstreams.NewFromConfig(cfg)).Records[1].Dynamodb.NewImage
	_, isMap := plain["m"].(*types.AttributeValueMemberM)
	require.False(t, isMap, "the SDK decoded the untagged {} as a map: the quirk is gone, and so is the need for FixEmptyMaps")

	out := getRecords(t, poller.NewStreamsClient(cfg))
	img := out.Records[1].Dynamodb.NewImage
	assert.Equal(t, &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}, img["m"])
	assert.Equal(t, &types.AttributeValueMemberS{Value: "before"}, img["a"])
	assert.Equal(t, &types.AttributeValueMemberS{Value: "after"}, img["z"])
	assert.Equal(t, &types.AttributeValueMemberL{Value: []types.AttributeValue{}}, img["l"])
	n, ok := img["n"].(*types.AttributeValueMemberM)
	require.True(t, ok, "n is %T", img["n"])
	assert.Equal(t, &types.AttributeValueMemberN{Value: "1.10"}, n.Value["k"])
	assert.Equal(t, &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}, n.Value["inner"])
	assert.NotNil(t, out.NextShardIterator)
	assert.Equal(t, "000000000000000000002", aws.ToString(out.Records[1].Dynamodb.SequenceNumber))

	// The processor's record then holds exactly what was written.
	rec := processor.FromStream(out.Records[1], "arn")
	require.NoError(t, rec.DecodeErr)
	assert.Equal(t, &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{}}, rec.NewImage["m"])
	// The first record had nothing to repair and is unchanged.
	assert.Equal(t, &types.AttributeValueMemberBOOL{Value: true}, out.Records[0].Dynamodb.NewImage["writesEnabled"])
}

func TestFixEmptyMaps_TouchesOnlyAttributeValuePositions(t *testing.T) {
	// {} inside strings, as a key name's neighbour, in lists, nested maps,
	// and with whitespace; a top-level field that is not an image is left
	// alone.
	body := `{"Records":[{"eventID":"{}","dynamodb":{"Keys":{"PK":{"S":"{}"}},` +
		`"NewImage":{"PK":{"S":"{}"},"e":{ },"l":{"L":[{},{"S":"x"},{"M":{"q":{}}}]},"s":{"SS":["{}"]}},` +
		`"OldImage":{"e":{}},"SequenceNumber":"1","StreamViewType":"NEW_AND_OLD_IMAGES"}}],"NextShardIterator":"{}"}`
	endpoint := streamsServer(t, []byte(body))
	cfg, err := infra.LocalConfig(context.Background(), endpoint)
	require.NoError(t, err)
	out, err := poller.NewStreamsClient(cfg).GetRecords(context.Background(), &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String("it")})
	require.NoError(t, err)
	require.Len(t, out.Records, 1)
	r := out.Records[0]
	empty := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
	assert.Equal(t, "{}", aws.ToString(r.EventID))
	assert.Equal(t, "{}", aws.ToString(out.NextShardIterator))
	assert.Equal(t, &types.AttributeValueMemberS{Value: "{}"}, r.Dynamodb.Keys["PK"])
	assert.Equal(t, &types.AttributeValueMemberS{Value: "{}"}, r.Dynamodb.NewImage["PK"])
	assert.Equal(t, empty, r.Dynamodb.NewImage["e"])
	assert.Equal(t, empty, r.Dynamodb.OldImage["e"])
	assert.Equal(t, &types.AttributeValueMemberSS{Value: []string{"{}"}}, r.Dynamodb.NewImage["s"])
	assert.Equal(t, &types.AttributeValueMemberL{Value: []types.AttributeValue{
		empty, &types.AttributeValueMemberS{Value: "x"},
		&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"q": empty}},
	}}, r.Dynamodb.NewImage["l"])
}

func TestFixEmptyMaps_LeavesOtherOperationsAndErrorsAlone(t *testing.T) {
	// A DescribeStream answer with {} is not rewritten (it has no images),
	// and an error body reaches the SDK's error decoder unchanged.
	desc := `{"StreamDescription":{"StreamArn":"arn","StreamStatus":"ENABLED","Shards":[],"KeySchema":[]}}`
	endpoint := streamsServer(t, []byte(desc))
	cfg, err := infra.LocalConfig(context.Background(), endpoint)
	require.NoError(t, err)
	out, err := poller.NewStreamsClient(cfg).DescribeStream(context.Background(), &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String("arn")})
	require.NoError(t, err)
	assert.Equal(t, "arn", aws.ToString(out.StreamDescription.StreamArn))

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.dynamodb.v20120810#ExpiredIteratorException", "message": "{} expired"})
	}))
	defer srv.Close()
	cfg, err = infra.LocalConfig(context.Background(), srv.URL)
	require.NoError(t, err)
	_, err = poller.NewStreamsClient(cfg).GetRecords(context.Background(), &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String("it")})
	var expired *types.ExpiredIteratorException
	require.ErrorAs(t, err, &expired)
	assert.True(t, strings.Contains(err.Error(), "{} expired"), err.Error())
}
