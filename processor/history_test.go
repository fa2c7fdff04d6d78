package processor_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// The writer puts a history entry (TENANT#{t}#BRANCH#{b}#HISTORY, issue
// 26) in the same transaction as every transaction write, so the stream
// carries their INSERTs among the transactions' records. A batch holding
// them folds the transactions exactly and ignores the entries: nothing
// quarantined (a history entry whose body is junk included), no report
// effect, and reconcile counts neither as transactions nor as strays.
func TestProcess_HistoryRecordsInABatchAreIgnored(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	const tenant, branch = "acme", "north"
	txn := func(id string, version int64, amount string) (aggregates.Key, table.Transaction) {
		k := aggregates.TransactionKey(tenant, branch, aggregates.Date{Year: 2024, Month: 5, Day: 1}, id)
		return k, table.Transaction{ID: id, Tenant: tenant, Branch: branch, Type: "INCOME", Amount: amount, Category: "food",
			CreatedAt: "2024-05-01T08:00:00Z", UpdatedAt: "2030-01-01T00:00:00Z", Version: version}
	}
	// history is an entry as the writer writes it (writer/store_history.go).
	history := func(tx table.Transaction, version int64, op string) map[string]ddbtypes.AttributeValue {
		body, err := json.Marshal(map[string]any{"id": tx.ID, "tenant": tx.Tenant, "branch": tx.Branch, "type": tx.Type,
			"amount": tx.Amount, "category": tx.Category, "createdAt": tx.CreatedAt, "updatedAt": tx.UpdatedAt, "version": tx.Version})
		require.NoError(t, err)
		item := table.Key(aggregates.HistoryKey(tenant, branch, tx.ID, version))
		item["entityType"] = table.S(aggregates.EntityTransactionHistory)
		item["id"], item["version"], item["operation"] = table.S(tx.ID), table.Int(version), table.S(op)
		item["transaction"], item["subject"], item["admin"] = table.S(string(body)), table.S("alice"), &ddbtypes.AttributeValueMemberBOOL{}
		item["receivedAt"], item["requestId"] = table.S("2030-01-01T00:00:00Z"), table.S("req-1")
		return item
	}
	put := func(item map[string]ddbtypes.AttributeValue) ddbtypes.TransactWriteItem {
		return ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{TableName: &e.table, Item: item}}
	}
	write := func(items ...ddbtypes.TransactWriteItem) {
		_, err := e.ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		require.NoError(t, err)
	}
	encode := func(k aggregates.Key, tx table.Transaction) map[string]ddbtypes.AttributeValue {
		item, err := table.EncodeTransaction(k, tx)
		require.NoError(t, err)
		return item
	}

	// a: created, then changed; b: created, then deleted.
	ka, a1 := txn("a", 1, "10")
	write(put(encode(ka, a1)), put(history(a1, 1, "created")))
	_, a2 := txn("a", 2, "12.5")
	write(put(encode(ka, a2)), put(history(a2, 2, "changed")))
	kb, b1 := txn("b", 1, "99")
	write(put(encode(kb, b1)), put(history(b1, 1, "created")))
	write(ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{TableName: &e.table, Key: table.Key(kb)}}, put(history(b1, 2, "deleted")))
	// An entry no writer would write (its body is no transaction, its
	// entityType a transaction's): its partition alone decides.
	junk := history(a2, 3, "changed")
	junk["transaction"], junk["entityType"] = table.S("{not json"), table.S(aggregates.EntityTransaction)
	_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: junk})
	require.NoError(t, err)

	shard, recs := e.records(t)
	historyRecords := 0
	for _, r := range recs {
		pk, _ := table.String(r.Keys, table.AttrPK)
		if pk == aggregates.HistoryPK(tenant, branch) {
			historyRecords++
			old, new := processor.Transactions(r)
			assert.Nil(t, old, "a history record has no transaction side")
			assert.Nil(t, new, "a history record has no transaction side")
		}
	}
	require.Equal(t, 5, historyRecords)
	p := e.processor(t, nil, nil)
	res, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs)
	require.NoError(t, err)
	assert.Equal(t, len(recs), res.Committed)
	assert.Equal(t, 4, res.Applied, "the transactions' four records")
	assert.Zero(t, res.Quarantined)
	assert.Equal(t, len(recs)-4, res.Ignored, "the history entries and the flags item")
	assert.Empty(t, quarantineIDs(t, e))

	stats := e.requireReconciled(t)
	assert.Equal(t, 1, stats.Transactions, "only a is a transaction")
	assert.Zero(t, stats.Invalid)
	out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &e.table, ConsistentRead: aws.Bool(true),
		Key: table.Key(aggregates.ReportKey{Tenant: tenant, Branch: branch, Period: aggregates.Period{Type: aggregates.Monthly, Value: "2024-05"}}.Key())})
	require.NoError(t, err)
	income, _ := table.String(out.Item, "totalIncome")
	if n, ok := out.Item["totalIncome"].(*ddbtypes.AttributeValueMemberN); ok {
		income = n.Value
	}
	assert.Equal(t, "12.5", income, "a's last version, once")
}
