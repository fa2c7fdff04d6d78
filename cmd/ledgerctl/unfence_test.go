package main

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// TestUnfence_RestoresBothLayoutsAndTheReportsReconcile: step F's rollback
// path (docs/exactly-once.md, second review, F-b). After a consumer of
// protocol 4 raised the flags' protocol and committed (its checkpoint and
// every head it wrote fenced), ledgerctl unfence refuses while a lease is
// live, writing nothing; with none live it puts the checkpoint back to
// sequenceNumber = pos (pos and countedTo gone), every head back to a
// numeric transactionCount (txCount gone) and the protocol to 3, and the
// reports reconcile (the branch reports; the tenant roll-ups' deltas
// wait in their lanes for a consumer that reads them); a second run finds nothing to do;
// a consumer of protocol 4 started again raises the protocol, fences again
// as it commits the rest, and the reports reconcile.
func TestUnfence_RestoresBothLayoutsAndTheReportsReconcile(t *testing.T) {
	ctx := context.Background()
	table, env := createdTable(t)
	coord := ledgertable.CoordinationTableName(table)

	c := ddbtest.Client(t)
	w := ledgertest.NewWorkload(2525)
	require.NoError(t, w.Run(ctx, c, table, 40))
	info, err := ledgertable.DescribeTable(ctx, c, table)
	require.NoError(t, err)
	streams := dynamodbstreams.NewFromConfig(ddbtest.Config(t))
	shards, err := ledgertest.ReadAll(ctx, streams, info.StreamARN, nil)
	require.NoError(t, err)
	shard, recs := shards[0].ID, shards[0].Records
	half := len(recs)
	p, err := processor.New(c, processor.Config{Table: table}, nil)
	require.NoError(t, err)
	raised, err := p.RaiseProtocol(ctx)
	require.NoError(t, err)
	require.True(t, raised)
	_, err = p.Process(ctx, p.ShardGuard(info.StreamARN, shard), recs[:half])
	require.NoError(t, err)

	cpKey := ledgertable.Key(aggregates.CheckpointKey(info.StreamARN, shard))
	checkpoint := func() map[string]ddbtypes.AttributeValue {
		out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord), Key: cpKey, ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		return out.Item
	}
	heads := func() (fenced, old int) {
		p := dynamodb.NewScanPaginator(c, &dynamodb.ScanInput{
			TableName: aws.String(table), ConsistentRead: aws.Bool(true),
			FilterExpression:          aws.String("entityType = :et"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":et": ledgertable.S(aggregates.EntityReport)},
		})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			require.NoError(t, err)
			for _, item := range page.Items {
				if ledgertable.FencedHead(item) {
					assert.IsType(t, &ddbtypes.AttributeValueMemberN{}, item[ledgertable.AttrTxCount])
					fenced++
					continue
				}
				assert.IsType(t, &ddbtypes.AttributeValueMemberN{}, item[ledgertable.AttrTransactionCount])
				assert.NotContains(t, item, ledgertable.AttrTxCount)
				old++
			}
		}
		return fenced, old
	}
	protocol := func() int64 {
		f, err := ledgertable.GetFlags(ctx, c, table)
		require.NoError(t, err)
		return f.Protocol
	}
	fenced, old := heads()
	require.Positive(t, fenced)
	require.Zero(t, old)
	require.IsType(t, &ddbtypes.AttributeValueMemberM{}, checkpoint()[ledgertable.AttrSequenceNumber])
	require.Equal(t, int64(4), protocol())

	// A live lease: refused, nothing written.
	lease := ledgertable.Key(aggregates.LeaseKey(info.StreamARN, shard))
	lease[ledgertable.AttrEntityType], lease[ledgertable.AttrShardID] = ledgertable.S(aggregates.EntityLease), ledgertable.S(shard)
	lease[ledgertable.AttrLeaseOwner] = ledgertable.S("poller-1")
	lease[ledgertable.AttrLeaseExpiry] = ledgertable.S(time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: lease})
	require.NoError(t, err)
	before := checkpoint()
	code, out, errOut := run(t, env, "unfence")
	require.Equal(t, exitError, code, out+errOut)
	assert.Contains(t, errOut, "leases are live")
	assert.Contains(t, errOut, shard)
	assert.Equal(t, before, checkpoint(), "nothing written")
	f2, _ := heads()
	assert.Equal(t, fenced, f2)
	assert.Equal(t, int64(4), protocol())

	// The lease expired (its poller stopped): unfenced.
	lease[ledgertable.AttrLeaseExpiry] = ledgertable.S(time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano))
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: lease})
	require.NoError(t, err)
	code, out, errOut = run(t, env, "unfence")
	require.Equal(t, exitOK, code, out+errOut)
	assert.Contains(t, out, "checkpoints unfenced: 1")
	assert.Contains(t, out, "protocol 4 -> 3")
	cp := checkpoint()
	assert.Equal(t, ledgertable.S(recs[half-1].SequenceNumber), cp[ledgertable.AttrSequenceNumber], "the position kept, in the old layout")
	assert.NotContains(t, cp, ledgertable.AttrPos)
	assert.NotContains(t, cp, ledgertable.AttrCountedTo)
	f3, o3 := heads()
	assert.Zero(t, f3)
	assert.Equal(t, fenced, o3)
	assert.Equal(t, int64(3), protocol())
	code, out, _ = run(t, env, "reconcile", "--rollups=false")
	require.Equal(t, exitOK, code, out)

	// Idempotent.
	code, out, errOut = run(t, env, "unfence")
	require.Equal(t, exitOK, code, out+errOut)
	assert.Contains(t, out, "checkpoints unfenced: 0")
	assert.Contains(t, out, "report heads unfenced: 0")
	assert.Contains(t, out, "protocol left as it was (3)")

	// Rolled forward again: the protocol raised, both fences back.
	q, err := processor.New(c, processor.Config{Table: table}, nil)
	require.NoError(t, err)
	raised, err = q.RaiseProtocol(ctx)
	require.NoError(t, err)
	assert.True(t, raised)
	require.NoError(t, w.Run(ctx, c, table, 30))
	shards, err = ledgertest.ReadAll(ctx, streams, info.StreamARN, nil)
	require.NoError(t, err)
	_, err = q.Process(ctx, q.ShardGuard(info.StreamARN, shard), shards[0].Records[half:])
	require.NoError(t, err)
	cp = checkpoint()
	assert.IsType(t, &ddbtypes.AttributeValueMemberM{}, cp[ledgertable.AttrSequenceNumber])
	assert.Equal(t, ledgertable.S(recs[half-1].SequenceNumber), cp[ledgertable.AttrCountedTo], "countedTo: the position at the second fence")
	f4, _ := heads()
	assert.Positive(t, f4)
	code, out, _ = run(t, env, "reconcile", "--rollups=false")
	require.Equal(t, exitOK, code, out)
}
