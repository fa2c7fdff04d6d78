package ddbconflict_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ddbconflict"
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

// A consumer's commit spans two tables: report items in the ledger table
// and the shard's checkpoint in the coordination table (checked with a
// ConditionCheck or claimed with an Update). Held, each of its items is
// held in its own table: another commit naming either is cancelled, a
// lease renewal or checkpoint move (a single-item UpdateItem of the
// coordination table) of the held checkpoint fails with
// TransactionConflictException, the same key in the other table is free,
// and reads (GetItem, Query, consistent or not) are never refused.
func TestTransport_ACommitAcrossTwoTablesHoldsEachOfItsItems(t *testing.T) {
	plain := ddbtest.Client(t)
	ledger := ddbtest.NewTable(t, plain)
	coord := ledger + "-coordination"
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	checkpoint := ddbconflict.Key(coord, map[string]string{"PK": "cp", "SK": "X"})
	var seen []string
	tr := &ddbconflict.Transport{Hold: func(_ context.Context, keys []string) {
		if slices.Contains(keys, checkpoint) {
			once.Do(func() { seen = keys; close(held); <-release })
		}
	}}
	c := emulated(t, tr)
	ctx := context.Background()
	update := func(table, pk string) ddbtypes.TransactWriteItem {
		return ddbtypes.TransactWriteItem{Update: &ddbtypes.Update{TableName: &table, Key: key(pk, "X"),
			UpdateExpression: aws.String("ADD n :one"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "1"}}}}
	}

	// The commit: a claim of the checkpoint, two report updates.
	done := make(chan error, 1)
	go func() {
		_, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
			update(coord, "cp"), update(ledger, "report"), check(ledger, "other")}})
		done <- err
	}()
	<-held
	assert.ElementsMatch(t, []string{
		checkpoint,
		ddbconflict.Key(ledger, map[string]string{"PK": "other", "SK": "X"}),
		ddbconflict.Key(ledger, map[string]string{"PK": "report", "SK": "X"}),
	}, seen, "every item of both tables, the ConditionCheck's among them, is held")

	tests := []struct {
		name  string
		items []ddbtypes.TransactWriteItem
		want  []string // cancellation reasons; nil: commits
	}{
		{"a stale committer's claim of the same checkpoint", []ddbtypes.TransactWriteItem{update(coord, "cp"), update(ledger, "r2")}, []string{"TransactionConflict", "None"}},
		{"a commit of another shard sharing a report item", []ddbtypes.TransactWriteItem{update(coord, "cp2"), update(ledger, "report")}, []string{"None", "TransactionConflict"}},
		{"a ConditionCheck of a held item", []ddbtypes.TransactWriteItem{update(coord, "cp3"), check(ledger, "report")}, []string{"None", "TransactionConflict"}},
		{"a held ConditionCheck's item updated", []ddbtypes.TransactWriteItem{update(ledger, "other")}, []string{"TransactionConflict"}},
		{"the same keys in the other table", []ddbtypes.TransactWriteItem{update(ledger, "cp"), update(coord, "report")}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tc.items})
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			assert.Equal(t, tc.want, reasons(t, err))
		})
	}

	// A checkpoint move outside a commit, on the held checkpoint.
	var tc *ddbtypes.TransactionConflictException
	_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &coord, Key: key("cp", "X"), UpdateExpression: aws.String("SET s = :s"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":s": &ddbtypes.AttributeValueMemberS{Value: "9"}}})
	assert.True(t, errors.As(err, &tc), "UpdateItem of the held checkpoint: %v", err)
	// A lease renewal of another item of the same partition is free.
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &coord, Key: key("cp", "LEASE"), UpdateExpression: aws.String("ADD n :one"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "1"}}})
	require.NoError(t, err)
	// Reads are never refused.
	for _, consistent := range []bool{true, false} {
		_, err = c.GetItem(ctx, &dynamodb.GetItemInput{TableName: &coord, Key: key("cp", "X"), ConsistentRead: aws.Bool(consistent)})
		require.NoError(t, err)
		_, err = c.Query(ctx, &dynamodb.QueryInput{TableName: &ledger, KeyConditionExpression: aws.String("PK = :pk"), ConsistentRead: aws.Bool(consistent),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": &ddbtypes.AttributeValueMemberS{Value: "report"}}})
		require.NoError(t, err)
	}
	cancelled, rejected := tr.Stats()
	assert.Equal(t, int64(4), cancelled)
	assert.Equal(t, int64(1), rejected)

	close(release)
	require.NoError(t, <-done)
	// Released, the checkpoint moves.
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &coord, Key: key("cp", "X"), UpdateExpression: aws.String("SET s = :s"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":s": &ddbtypes.AttributeValueMemberS{Value: "9"}}})
	require.NoError(t, err)
}

// A transaction DynamoDB Local refuses (here its condition fails) holds
// nothing once answered, whatever Latency is: AWS releases the items of a
// transaction it cancels.
func TestTransport_ARefusedTransactionReleasesItsItemsAtOnce(t *testing.T) {
	plain := ddbtest.Client(t)
	table := ddbtest.NewTable(t, plain)
	var holds atomic.Int64
	tr := &ddbconflict.Transport{Hold: func(context.Context, []string) { holds.Add(1) }}
	c := emulated(t, tr)
	ctx := context.Background()
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: map[string]ddbtypes.AttributeValue{
		"PK": &ddbtypes.AttributeValueMemberS{Value: "a"}, "SK": &ddbtypes.AttributeValueMemberS{Value: "X"}, "x": &ddbtypes.AttributeValueMemberN{Value: "1"}}})
	require.NoError(t, err)
	_, err = c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{check(table, "a"), put(table, "b")}})
	assert.Equal(t, []string{"ConditionalCheckFailed", "None"}, reasons(t, err), "DynamoDB Local's own cancellation")
	assert.Zero(t, holds.Load(), "a refused transaction is not held")
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: key("b", "X")})
	require.NoError(t, err)
	cancelled, rejected := tr.Stats()
	assert.Zero(t, cancelled+rejected)
}

// An SDK retry of a transaction (the same ClientRequestToken) that arrives
// while the first attempt is still in flight is answered
// TransactionInProgressException, as AWS answers it, not as a conflict with
// itself.
func TestTransport_TheSameTokenInFlightIsInProgress(t *testing.T) {
	plain := ddbtest.Client(t)
	table := ddbtest.NewTable(t, plain)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	tr := &ddbconflict.Transport{Hold: func(context.Context, []string) { once.Do(func() { close(held); <-release }) }}
	c := emulated(t, tr)
	ctx := context.Background()
	in := &dynamodb.TransactWriteItemsInput{ClientRequestToken: aws.String("token-1"), TransactItems: []ddbtypes.TransactWriteItem{put(table, "t")}}
	done := make(chan error, 1)
	go func() {
		_, err := c.TransactWriteItems(ctx, in)
		done <- err
	}()
	<-held
	_, err := c.TransactWriteItems(ctx, in, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	var tip *ddbtypes.TransactionInProgressException
	assert.True(t, errors.As(err, &tip), "the same token in flight: %v", err)
	close(release)
	require.NoError(t, <-done)
	_, err = c.TransactWriteItems(ctx, in)
	require.NoError(t, err, "the token's request finished: its repeat succeeds (DynamoDB Local's idempotency)")
}
