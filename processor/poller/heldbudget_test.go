package poller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// Issue 23: each leased shard could hold up to BatchRecords (10,000)
// records, so a poller with hundreds of shards behind held gigabytes. Now
// the records in memory across all its shards come out of one budget
// (MaxHeldRecords): sixteen shards all behind, read by one drain with a
// budget of 40 records (a page of 1,000 each otherwise), never have more
// than 40 in hand or in flight, every shard is read to its end in batches
// smaller than its limit, and the reports are exact. Without the budget
// the peak is the pages in flight, up to 16,000 records.
func TestPoller_RecordsBudgetBoundsManyShardsBehind(t *testing.T) {
	ddbtest.Long(t)
	ctx := context.Background()
	const shards, budget = 16, 40
	e := newEmuEnv(t, 2303, streamemu.Config{Shards: shards})
	e.write(t, 300)
	// The workload's transactions land in the shards of a few partition
	// keys; items of many keys that are not transactions (records without
	// effect, read and stepped over) put every shard behind. The key
	// varies at its start: the emulation shards by the high bits of an
	// FNV-1a hash, which keys that differ only at their end share.
	for i := 0; i < 480; i += 25 {
		var reqs []ddbtypes.WriteRequest
		for j := i; j < i+25; j++ {
			key := &ddbtypes.AttributeValueMemberS{Value: fmt.Sprintf("%d#TEST#filler", j)}
			reqs = append(reqs, ddbtypes.WriteRequest{PutRequest: &ddbtypes.PutRequest{Item: map[string]ddbtypes.AttributeValue{"PK": key, "SK": key}}})
		}
		out, err := e.ddb.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddbtypes.WriteRequest{e.table: reqs}})
		require.NoError(t, err)
		require.Empty(t, out.UnprocessedItems)
	}
	// Every record written is in the emulation before the drain starts:
	// DynamoDB Local's stream shows a write some time after it, so a
	// marker item is written last and waited for.
	_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.table), Item: map[string]ddbtypes.AttributeValue{
		"PK": &ddbtypes.AttributeValueMemberS{Value: "TEST#marker"}, "SK": &ddbtypes.AttributeValueMemberS{Value: "TEST#marker"},
	}})
	require.NoError(t, err)
	eventually(t, "the marker in the emulated stream", 60*time.Second, func() bool {
		require.NoError(t, e.s.Sync(ctx))
		for _, h := range e.s.History() {
			if pk, _ := h.Record.Dynamodb.Keys["PK"].(*st.AttributeValueMemberS); pk != nil && pk.Value == "TEST#marker" {
				return true
			}
		}
		return false
	})
	// The last record of every shard when the drain starts: it reads each
	// shard up to it at least.
	last := map[string]string{}
	for _, h := range e.s.History() {
		last[h.Shard] = h.Seq
	}
	require.Len(t, last, shards, "every shard behind")

	// Leases long enough that no renewal misses on a loaded machine: a
	// lease lost mid-batch leaves a half-committed batch, whose reader must
	// read on past the budget to finish it (reader.take's force), which is
	// by design and not what this test measures.
	tp := e.poller(t, "budgeted", nil, func(c *poller.Config) {
		c.Drain, c.MaxHeldRecords, c.LeaseDuration = true, budget, 30*time.Second
	})
	e.runDrain(t, tp, 3*time.Minute)

	peak := poller.BudgetPeak(tp.Poller)
	t.Logf("budget %d: peak in use %d, reads that waited %v", budget, peak, counter(t, tp.m.HeldBudgetWaits))
	assert.LessOrEqual(t, peak, budget, "records in hand or in flight at once")
	assert.Positive(t, peak)
	assert.Positive(t, counter(t, tp.m.HeldBudgetWaits), "shards waited for the budget")
	assert.Equal(t, float64(budget), counter(t, tp.m.HeldBudget))
	assert.Zero(t, counter(t, tp.m.HeldBudgetUsed), "all given back")
	assert.Zero(t, counter(t, tp.m.HeldRecords))
	n, recs := batches(t, tp)
	require.Positive(t, n)
	assert.LessOrEqual(t, recs/float64(n), float64(budget), "batches within the budget")

	// Every shard with records was read to its end by this drain.
	_, cps, err := table.ReadStreamState(ctx, e.ddb, table.CoordinationTableName(e.table), e.stream.arn, nil)
	require.NoError(t, err)
	for id, seq := range last {
		if assert.Contains(t, cps, id, "shard %s read", id) {
			assert.GreaterOrEqual(t, processor.CompareSequence(cps[id].Seq, seq), 0, "shard %s read to its last record %s", id, seq)
		}
	}
	e.requireReconciled(t)
	e.requireInOrder(t, nil)
}

// Records as large as a tenant's report writes can make them (old and new
// images of report items near 40 KB; here 300 KB each, three to a page of
// AWS's 1 MB): the records budget alone would let four shards gather tens
// of them each. The bytes budget of 2 MiB keeps at most two pages in
// flight or held at once, every shard is read to its end, and the reports
// are exact.
func TestPoller_BytesBudgetBoundsLargeRecords(t *testing.T) {
	e := newEnv(t, 2305)
	e.stream.pageSize = 3
	shards := []string{"shardId-big-A", "shardId-big-B", "shardId-big-C", "shardId-big-D"}
	for _, id := range shards {
		e.stream.addShard(id, "")
	}
	recs := e.write(t, 120)
	for i := range recs {
		recs[i].Dynamodb.SizeBytes = aws.Int64(300 << 10)
	}
	e.stream.split(shards, recs)
	// 30 s leases, as above: at load 27 a 3 s lease expired under a slow
	// renewal and its pages were read again (every record read once fails).
	tp := e.drain(t, "big", func(c *poller.Config) {
		c.MaxHeldBytes, c.BatchWindow, c.LeaseDuration = 2<<20, time.Second, 30*time.Second
	})
	peak := poller.BytesBudgetPeak(tp.Poller)
	t.Logf("bytes budget 2 MiB: peak in use %d bytes; %d records of 300 KB", peak, len(recs))
	assert.LessOrEqual(t, peak, 2<<20, "bytes in hand or in flight at once")
	assert.Positive(t, counter(t, tp.m.HeldBudgetWaits), "reads waited for the bytes budget")
	assert.Zero(t, counter(t, tp.m.HeldBytesBudgetUsed), "all given back")
	assert.Equal(t, float64(len(recs)), counter(t, tp.m.RecordsRead), "every record read once")
	e.requireReconciled(t)
}
