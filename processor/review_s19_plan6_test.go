package processor_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/table"
)

// The adversarial review of plan layout 6 as designed (session 19,
// docs/exactly-once.md, "Review (adversarial, session 19): plan layout 6
// as designed"): the DynamoDB facts its record relies on, established on
// DynamoDB Local. Nothing of layout 6 is built; these pin the expression
// forms the design writes, so that the builder starts from facts.
func TestReviewS19Plan6_StagingAndOpenMarkExpressions(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	coord := table.CoordinationTableName(e.table)
	key := map[string]ddbtypes.AttributeValue{
		"PK": sAV("ROLLUPSTAGE#label#shardId-1"), "SK": sAV("000042#t#EUR#0"),
	}
	get := func() map[string]ddbtypes.AttributeValue {
		t.Helper()
		out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &coord, Key: key, ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		return out.Item
	}
	stage := func(k string, periods map[string]string) {
		t.Helper()
		names := map[string]string{"#lg": "lastGroup"}
		values := map[string]ddbtypes.AttributeValue{":zero": nAV("0"), ":k": nAV(k)}
		expr := "SET #lg = :k"
		i := 0
		for p, v := range periods {
			i++
			n, val := "#b"+string(rune('0'+i)), ":t"+string(rune('0'+i))
			names[n], values[val] = "B#"+p, nAV(v)
			expr += ", " + n + " = if_not_exists(" + n + ", :zero) + " + val
		}
		_, err := e.ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{{Update: &ddbtypes.Update{
			TableName: &coord, Key: key, UpdateExpression: aws.String(expr),
			ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		}}}})
		require.NoError(t, err)
	}

	// A staging update creates the item and its flat B# numbers from
	// nothing, and a later one adds to them (names holding '#' through
	// placeholders).
	stage("1", map[string]string{"DAY#2026-11-27": "1", "YEAR#2026": "1"})
	stage("2", map[string]string{"DAY#2026-11-27": "2"})
	it := get()
	assert.Equal(t, "3", it["B#DAY#2026-11-27"].(*ddbtypes.AttributeValueMemberN).Value)
	assert.Equal(t, "1", it["B#YEAR#2026"].(*ddbtypes.AttributeValueMemberN).Value)
	assert.Equal(t, "2", it["lastGroup"].(*ddbtypes.AttributeValueMemberN).Value)

	// S19-P6-1: a stale item (an earlier attempt at the same key) is
	// added to by an update — the wrong sum the review found — and is
	// replaced whole by kfirst's Put: no stale period survives it.
	stage("0", map[string]string{"DAY#2026-11-27": "1"})
	assert.Equal(t, "4", get()["B#DAY#2026-11-27"].(*ddbtypes.AttributeValueMemberN).Value, "an update adds to a stale item")
	put := map[string]ddbtypes.AttributeValue{"PK": key["PK"], "SK": key["SK"], "B#DAY#2026-11-27": nAV("1"), "lastGroup": nAV("0")}
	_, err := e.ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{{Put: &ddbtypes.Put{TableName: &coord, Item: put}}}})
	require.NoError(t, err)
	it = get()
	assert.Equal(t, "1", it["B#DAY#2026-11-27"].(*ddbtypes.AttributeValueMemberN).Value)
	assert.NotContains(t, it, "B#YEAR#2026", "kfirst's Put leaves no stale period")

	// An open mark: ADD then DELETE of the only id leaves no attribute,
	// so the counted repair's pin attribute_not_exists(open) passes again
	// once a batch's last group of the branch lands.
	akey := map[string]ddbtypes.AttributeValue{"PK": sAV("APPLIED#t"), "SK": sAV("BRANCH#b")}
	for _, op := range []string{"ADD #o :id", "DELETE #o :id"} {
		_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &coord, Key: akey, UpdateExpression: aws.String(op),
			ExpressionAttributeNames:  map[string]string{"#o": "open"},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":id": &ddbtypes.AttributeValueMemberSS{Value: []string{"label~shardId-1~000042"}}},
		})
		require.NoError(t, err)
	}
	_, err = e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &coord, Key: akey, UpdateExpression: aws.String("SET #e = :one"),
		ConditionExpression:       aws.String("attribute_not_exists(#o)"),
		ExpressionAttributeNames:  map[string]string{"#o": "open", "#e": "epoch"},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": nAV("1")},
	})
	require.NoError(t, err, "a set emptied by DELETE is no attribute")

	// A delta item with an empty periods map (every period zero at
	// commit, "Also noted" (b)) is accepted in a transaction and decodes.
	delta := map[string]ddbtypes.AttributeValue{
		"PK": sAV("TENANT#t#ROLLUPLANE#3"), "SK": sAV("shardId-1~000042~b#EUR#0"),
		table.AttrEntityType: sAV(table.EntityRollupDelta), "currency": sAV("EUR"),
		table.AttrPeriods: &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{}},
	}
	_, err = e.ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{{Put: &ddbtypes.Put{TableName: &coord, Item: delta}}}})
	require.NoError(t, err)
	d, err := table.DecodeRollupDelta(delta)
	require.NoError(t, err)
	assert.Empty(t, d.Periods)
	assert.Equal(t, 3, d.Lane)
}
