package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"

	ledgertable "github.com/ledger-dev/ledger/table"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/processor"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

func mapAV(kv ...any) *ddbtypes.AttributeValueMemberM {
	out := map[string]ddbtypes.AttributeValue{}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1].(ddbtypes.AttributeValue)
	}
	return &ddbtypes.AttributeValueMemberM{Value: out}
}

func TestWriteUnits_OnePerStartedKilobyteOfTheLarger(t *testing.T) {
	assert.Equal(t, 1, ledgertable.WriteUnits(0, 0))
	assert.Equal(t, 1, ledgertable.WriteUnits(0, 1024))
	assert.Equal(t, 2, ledgertable.WriteUnits(1025, 10))
	assert.Equal(t, 3, ledgertable.WriteUnits(2049, 3072))
}

// Every shape of attribute the approaches write, sized by ItemSize, padded
// to exactly 1,024 bytes (DynamoDB Local must bill 1 WCU) and to 1,025 (2
// WCU): the calculator agrees with DynamoDB Local byte for byte.
func TestItemSize_MatchesDynamoDBLocal(t *testing.T) {
	ctx := context.Background()
	db := ddbtest.Client(t)
	table := ddbtest.NewTable(t, db)
	shapes := map[string]map[string]ddbtypes.AttributeValue{
		"strings":  {"a": sAV("x"), "café ☕": sAV("é")},
		"numbers":  {"n1": nAV("0"), "n2": nAV("-12.50"), "n3": nAV("1200"), "n4": nAV("120"), "n5": nAV("0.001")},
		"bool":     {"b": &ddbtypes.AttributeValueMemberBOOL{Value: true}, "z": &ddbtypes.AttributeValueMemberNULL{Value: true}},
		"emptymap": {"m": mapAV()},
		"report":   {"byCategory": mapAV("food", mapAV("totalIncome", nAV("12.5"), "totalExpense", nAV("0"), "transactionCount", nAV("3")), "x#y", mapAV("totalIncome", nAV("1"), "totalExpense", nAV("2.25"), "transactionCount", nAV("-1")))},
		"list":     {"l": &ddbtypes.AttributeValueMemberL{Value: []ddbtypes.AttributeValue{sAV("a"), nAV("1"), mapAV("k", sAV("v"))}}},
		"sets":     {"ss": &ddbtypes.AttributeValueMemberSS{Value: []string{"a", "bb"}}, "ns": &ddbtypes.AttributeValueMemberNS{Value: []string{"1", "23"}}},
	}
	for name, attrs := range shapes {
		t.Run(name, func(t *testing.T) {
			for _, target := range []int{1024, 1025} {
				item := map[string]ddbtypes.AttributeValue{"PK": sAV("size-" + name), "SK": sAV(fmt.Sprint(target)), "f": sAV("")}
				for k, v := range attrs {
					item[k] = v
				}
				item["f"] = sAV(strings.Repeat("a", target-ledgertable.ItemSize(item)))
				require.Equal(t, target, ledgertable.ItemSize(item))
				out, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: item, ReturnConsumedCapacity: ddbtypes.ReturnConsumedCapacityTotal})
				require.NoError(t, err)
				assert.Equal(t, float64(ledgertable.WriteUnits(0, target)), aws.ToFloat64(out.ConsumedCapacity.CapacityUnits), "%d bytes", target)
			}
		})
	}
}

func TestApplyUpdate_EvaluatesWhatTheConsumersSend(t *testing.T) {
	item := map[string]ddbtypes.AttributeValue{
		"PK": sAV("p"), "SK": sAV("s"), "n": nAV("1.5"),
		"m": mapAV("k", mapAV("i", nAV("2"))), "l": &ddbtypes.AttributeValueMemberL{Value: []ddbtypes.AttributeValue{sAV("a")}},
		"s": &ddbtypes.AttributeValueMemberSS{Value: []string{"w", "y"}}, "e": &ddbtypes.AttributeValueMemberSS{Value: []string{"gone"}},
	}
	tests := []struct {
		name, expr string
		names      map[string]string
		values     map[string]ddbtypes.AttributeValue
		check      func(t *testing.T, got map[string]ddbtypes.AttributeValue)
	}{
		{"if_not_exists plus", "SET #n = if_not_exists(#n, :z) + :v, #x = if_not_exists(#x, :z) + :v",
			map[string]string{"#n": "n", "#x": "x"}, map[string]ddbtypes.AttributeValue{":z": nAV("0"), ":v": nAV("0.5")},
			func(t *testing.T, got map[string]ddbtypes.AttributeValue) {
				assert.Equal(t, "2", str2(got["n"]))
				assert.Equal(t, "0.5", str2(got["x"]))
			}},
		{"nested path with placeholders", "SET #m.#k.#i = #m.#k.#i - :v, #m.#new = :e",
			map[string]string{"#m": "m", "#k": "k", "#i": "i", "#new": "a.b"}, map[string]ddbtypes.AttributeValue{":v": nAV("3"), ":e": mapAV()},
			func(t *testing.T, got map[string]ddbtypes.AttributeValue) {
				m := got["m"].(*ddbtypes.AttributeValueMemberM).Value
				assert.Equal(t, "-1", str2(m["k"].(*ddbtypes.AttributeValueMemberM).Value["i"]))
				assert.Contains(t, m, "a.b")
				// the original is untouched
				assert.Equal(t, "2", str2(item["m"].(*ddbtypes.AttributeValueMemberM).Value["k"].(*ddbtypes.AttributeValueMemberM).Value["i"]))
			}},
		{"remove and add", "SET a = :v REMOVE n, m.k ADD c :v",
			nil, map[string]ddbtypes.AttributeValue{":v": nAV("1")},
			func(t *testing.T, got map[string]ddbtypes.AttributeValue) {
				assert.NotContains(t, got, "n")
				assert.Empty(t, got["m"].(*ddbtypes.AttributeValueMemberM).Value)
				assert.Equal(t, "1", str2(got["c"]))
			}},
		{"sets: ADD to a new and an existing set, DELETE to empty removes the attribute", "ADD o :a, s :b DELETE e :e",
			nil, map[string]ddbtypes.AttributeValue{":a": &ddbtypes.AttributeValueMemberSS{Value: []string{"x"}}, ":b": &ddbtypes.AttributeValueMemberSS{Value: []string{"y", "z"}},
				":e": &ddbtypes.AttributeValueMemberSS{Value: []string{"gone"}}},
			func(t *testing.T, got map[string]ddbtypes.AttributeValue) {
				assert.Equal(t, []string{"x"}, got["o"].(*ddbtypes.AttributeValueMemberSS).Value)
				assert.Equal(t, []string{"w", "y", "z"}, got["s"].(*ddbtypes.AttributeValueMemberSS).Value)
				assert.NotContains(t, got, "e", "the set's last member deleted: no attribute, as in DynamoDB")
			}},
		{"DELETE of some members, and from an absent attribute", "DELETE s :d, none :d",
			nil, map[string]ddbtypes.AttributeValue{":d": &ddbtypes.AttributeValueMemberSS{Value: []string{"w"}}},
			func(t *testing.T, got map[string]ddbtypes.AttributeValue) {
				assert.Equal(t, []string{"y"}, got["s"].(*ddbtypes.AttributeValueMemberSS).Value)
				assert.NotContains(t, got, "none")
			}},
		{"list_append and index", "SET l = list_append(l, :x), l[0] = :y",
			nil, map[string]ddbtypes.AttributeValue{":x": &ddbtypes.AttributeValueMemberL{Value: []ddbtypes.AttributeValue{sAV("b")}}, ":y": sAV("z")},
			func(t *testing.T, got map[string]ddbtypes.AttributeValue) {
				l := got["l"].(*ddbtypes.AttributeValueMemberL).Value
				require.Len(t, l, 2)
				assert.Equal(t, "z", str(l[0]))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := applyUpdate(item, tt.expr, tt.names, tt.values)
			require.NoError(t, err)
			tt.check(t, got)
		})
	}
	_, err := applyUpdate(item, "SET #missing.x = :v", map[string]string{"#missing": "nope"}, map[string]ddbtypes.AttributeValue{":v": nAV("1")})
	assert.Error(t, err, "a nested path under a missing map fails, as in DynamoDB")
}

func str2(v ddbtypes.AttributeValue) string {
	if n, ok := v.(*ddbtypes.AttributeValueMemberN); ok {
		return n.Value
	}
	return ""
}

// The meter bills by its own copy of every item; after approach 1 and 2's
// updates (breakdown maps, markers, a duplicate claim) its copies equal the
// table, its computed ConsumedCapacity equals what DynamoDB Local reports,
// and the failed conditional put of the duplicate is billed.
func TestMeter_ModelMatchesTheTableAndDynamoDBLocal(t *testing.T) {
	ctx := context.Background()
	db := ddbtest.Client(t)
	table := ddbtest.NewTable(t, db)
	m := NewMeter(db)
	h := &PerRecord{API: m, Table: table, Idempotent: true}
	ops := WorkloadB.Generate(60, 1)
	for i, op := range ops {
		if op.Kind == OpDelete {
			continue
		}
		keys := map[string]ddbtypes.AttributeValue{"PK": op.New["PK"], "SK": op.New["SK"]}
		rec := recordOf(fmt.Sprintf("e%d", i), keys, op.Old, op.New)
		require.NoError(t, h.record(ctx, rec))
		if i == 10 {
			require.NoError(t, h.record(ctx, rec)) // delivered twice: skipped
		}
	}
	c := m.Cost()
	require.NoError(t, m.Err())
	require.NoError(t, m.Check(ctx, table))
	assert.Equal(t, float64(c.LocalUnits), c.Reported)
	assert.Equal(t, 1, c.Failed)
	assert.Greater(t, c.Units, c.LocalUnits, "the failed put is billed")
}

func recordOf(id string, keys, old, new map[string]ddbtypes.AttributeValue) processor.Record {
	r := processor.Record{EventID: id, EventName: "INSERT", SequenceNumber: "1", Keys: keys, OldImage: old, NewImage: new, StreamViewType: "NEW_AND_OLD_IMAGES"}
	if old != nil {
		r.EventName = "MODIFY"
	}
	return r
}

// Two writes of one item planned before either settles (a lease renewal
// beside a commit of the poller's checkpoint) are each applied to the item
// as the meter knows it when they settle: the model keeps both.
func TestMeter_WritesOfOneItemPlannedTogetherBothCount(t *testing.T) {
	ctx := context.Background()
	db := ddbtest.Client(t)
	table := ddbtest.NewTable(t, db)
	m := NewMeter(db)
	key := map[string]ddbtypes.AttributeValue{"PK": &ddbtypes.AttributeValueMemberS{Value: "STREAM#s"}, "SK": &ddbtypes.AttributeValueMemberS{Value: "SHARD#1"}}
	update := func(attr, v string) *dynamodb.UpdateItemInput {
		return &dynamodb.UpdateItemInput{TableName: &table, Key: key, UpdateExpression: aws.String("SET #a = :v"),
			ExpressionAttributeNames:  map[string]string{"#a": attr},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":v": &ddbtypes.AttributeValueMemberS{Value: v}}}
	}
	a, b := update("sequenceNumber", "000000000000000000123"), update("leaseOwner", "poller-1")
	wa := m.planUpdate(table, key, a.UpdateExpression, a.ExpressionAttributeNames, a.ExpressionAttributeValues)
	wb := m.planUpdate(table, key, b.UpdateExpression, b.ExpressionAttributeNames, b.ExpressionAttributeValues)
	for _, in := range []*dynamodb.UpdateItemInput{a, b} {
		_, err := db.UpdateItem(ctx, in)
		require.NoError(t, err)
	}
	m.settle("UpdateItem", []write{wa}, 1, true, nil)
	m.settle("UpdateItem", []write{wb}, 1, true, nil)
	require.NoError(t, m.Check(ctx, table))
}

// The meter attributes the units it bills to their partition keys: all
// actions of a transaction (twice, as billed) and single writes, each
// key's total and its most in one second, hottest first (issue 23: no key
// the fleet writes above half a partition's 1,000 units a second).
func TestMeter_KeyRatesAttributeUnitsToPartitionKeys(t *testing.T) {
	ctx := context.Background()
	db := ddbtest.Client(t)
	table := ddbtest.NewTable(t, db)
	m := NewMeter(db)
	put := func(pk, sk string) *ddbtypes.Put {
		return &ddbtypes.Put{TableName: &table, Item: map[string]ddbtypes.AttributeValue{"PK": sAV(pk), "SK": sAV(sk)}}
	}
	for i := range 3 {
		_, err := m.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
			{Put: put("HOT", fmt.Sprint("a", i))}, {Put: put("HOT", fmt.Sprint("b", i))}, {Put: put("COLD", fmt.Sprint(i))},
		}})
		require.NoError(t, err)
	}
	_, err := m.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: map[string]ddbtypes.AttributeValue{"PK": sAV("COLD"), "SK": sAV("x")}})
	require.NoError(t, err)
	rates := m.KeyRates(0)
	require.Len(t, rates, 2)
	assert.Equal(t, "HOT", rates[0].PK, "hottest first")
	assert.Equal(t, 12, rates[0].Units, "6 actions of 1 unit, twice")
	assert.Equal(t, 7, rates[1].Units, "3 actions twice and a put")
	for _, r := range rates {
		assert.Equal(t, table, r.Table)
		assert.LessOrEqual(t, r.Peak, r.Units)
		assert.Positive(t, r.Peak)
		assert.Positive(t, r.Seconds)
	}
	assert.Len(t, m.KeyRates(1), 1)
	assert.Equal(t, 19, m.Cost().Units, "the keys' units are the bill")
}
