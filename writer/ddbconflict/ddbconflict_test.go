package ddbconflict_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/writer/ddbconflict"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

func key(pk, sk string) map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{"PK": &ddbtypes.AttributeValueMemberS{Value: pk}, "SK": &ddbtypes.AttributeValueMemberS{Value: sk}}
}

func put(table, pk string) ddbtypes.TransactWriteItem {
	return ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{TableName: &table, Item: key(pk, "X")}}
}

func check(table, pk string) ddbtypes.TransactWriteItem {
	return ddbtypes.TransactWriteItem{ConditionCheck: &ddbtypes.ConditionCheck{TableName: &table, Key: key(pk, "X"),
		ConditionExpression: aws.String("attribute_not_exists(#x)"), ExpressionAttributeNames: map[string]string{"#x": "x"}}}
}

// emulated is a client whose transport is tr in front of DynamoDB Local;
// the first transaction that holds a key in hold stays in flight until
// release is closed.
func emulated(t *testing.T, tr *ddbconflict.Transport) *dynamodb.Client {
	return ddbtest.Client(t, infra.WithTransportWrapper(func(next http.RoundTripper) http.RoundTripper {
		tr.Next = next
		return tr
	}))
}

func reasons(t *testing.T, err error) []string {
	t.Helper()
	var tce *ddbtypes.TransactionCanceledException
	require.True(t, errors.As(err, &tce), "want TransactionCanceledException, got %v", err)
	var codes []string
	for _, r := range tce.CancellationReasons {
		codes = append(codes, aws.ToString(r.Code))
	}
	return codes
}

func TestTransport_OverlappingWritesConflictAsOnAWS(t *testing.T) {
	plain := ddbtest.Client(t)
	table := ddbtest.NewTable(t, plain)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	tr := &ddbconflict.Transport{Hold: func(_ context.Context, keys []string) {
		if len(keys) == 2 && strings.Contains(keys[0], "hot") {
			once.Do(func() { close(held); <-release })
		}
	}}
	c := emulated(t, tr)
	ctx := context.Background()

	// A transaction of two items, kept in flight.
	done := make(chan error, 1)
	go func() {
		_, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{put(table, "hot"), put(table, "hot2")}})
		done <- err
	}()
	<-held

	// Another transaction naming one of its items, even as a
	// ConditionCheck, is cancelled; its other items' reason is None.
	_, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{put(table, "cold"), check(table, "hot2")}})
	assert.Equal(t, []string{"None", "TransactionConflict"}, reasons(t, err))
	// Single-item writes of a held item fail with TransactionConflictException.
	var tc *ddbtypes.TransactionConflictException
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: key("hot", "X")})
	assert.True(t, errors.As(err, &tc), "PutItem: %v", err)
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &table, Key: key("hot2", "X"), UpdateExpression: aws.String("SET y = :y"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":y": &ddbtypes.AttributeValueMemberN{Value: "1"}}})
	assert.True(t, errors.As(err, &tc), "UpdateItem: %v", err)
	_, err = c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: key("hot", "X")})
	assert.True(t, errors.As(err, &tc), "DeleteItem: %v", err)
	// Other items are free; reads are never refused.
	_, err = c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{put(table, "cold"), put(table, "cold2")}})
	require.NoError(t, err)
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: key("cold3", "X")})
	require.NoError(t, err)
	out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: key("hot", "X"), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	assert.NotNil(t, out.Item, "DynamoDB Local applied the held transaction; its answer is what is held back")
	cancelled, rejected := tr.Stats()
	assert.Equal(t, int64(1), cancelled)
	assert.Equal(t, int64(3), rejected)

	// Released, the first commits and its items are free again.
	close(release)
	require.NoError(t, <-done)
	_, err = c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{put(table, "cold"), check(table, "hot3")}})
	require.NoError(t, err)
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: key("hot", "X")})
	require.NoError(t, err)

	// Off passes everything through.
	held2, release2 := make(chan struct{}), make(chan struct{})
	var once2 sync.Once
	tr.Hold = func(_ context.Context, keys []string) {
		if len(keys) == 2 && strings.Contains(keys[0], "warm") {
			once2.Do(func() { close(held2); <-release2 })
		}
	}
	go func() {
		_, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{put(table, "warm"), put(table, "warm2")}})
		done <- err
	}()
	<-held2
	tr.Off.Store(true)
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: key("warm", "X")})
	require.NoError(t, err, "emulation off")
	close(release2)
	require.NoError(t, <-done)
}

// The answer on the wire is AWS's: status, content type, __type, message
// and reasons, so any client (not only this SDK) sees what AWS sends.
func TestTransport_AnswersAsAWSOnTheWire(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	tr := &ddbconflict.Transport{Next: http.DefaultTransport, Hold: func(context.Context, []string) {
		once.Do(func() { close(held); <-release })
	}}
	endpoint := ddbtest.Endpoint(t)
	table := ddbtest.NewTable(t, ddbtest.Client(t))
	send := func(op, body string) (*http.Response, string) {
		req, err := http.NewRequest("POST", endpoint, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("X-Amz-Target", "DynamoDB_20120810."+op)
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0")
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	item := `{"PK":{"S":"k"},"SK":{"S":"X"}}`
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", endpoint, strings.NewReader(`{"TransactItems":[{"Put":{"TableName":"`+table+`","Item":`+item+`}}]}`))
		req.Header.Set("X-Amz-Target", "DynamoDB_20120810.TransactWriteItems")
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-held
	resp, body := send("TransactWriteItems", `{"TransactItems":[{"Put":{"TableName":"`+table+`","Item":{"PK":{"S":"o"},"SK":{"S":"X"}}}},{"Delete":{"TableName":"`+table+`","Key":{"SK":{"S":"X"},"PK":{"S":"k"}}}}]}`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, "application/x-amz-json-1.0", resp.Header.Get("Content-Type"))
	assert.JSONEq(t, `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
		"Message":"Transaction cancelled, please refer cancellation reasons for specific reasons [None, TransactionConflict]",
		"CancellationReasons":[{"Code":"None"},{"Code":"TransactionConflict","Message":"Transaction is ongoing for the item"}]}`, body)
	resp, body = send("UpdateItem", `{"TableName":"`+table+`","Key":`+item+`,"UpdateExpression":"SET y = :y","ExpressionAttributeValues":{":y":{"N":"1"}}}`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.JSONEq(t, `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException","message":"Transaction is ongoing for the item"}`, body)
	close(release)
	assert.Equal(t, http.StatusOK, <-first, "the held transaction commits")
}
