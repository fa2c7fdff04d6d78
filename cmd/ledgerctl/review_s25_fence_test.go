package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/processor/poller"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// TestReviewS25F3_LedgerctlSaysProtocol4BeforeItsFirstFence: S25-F3
// (docs/exactly-once.md, "Review (adversarial, session 25): step F as
// built"). Two ledgerctl commands write as consumers of this version and
// leave what they write fenced: replay (the report heads it updates) and
// abandon-batch (the checkpoint). Only the poller and the Lambda raised the
// flags' protocol at start, so on a table no consumer of protocol 4 had
// started on yet they wrote fences under a protocol absent from the flags:
// F's invariant, "the flag is at 4 before the first fence exists", broken,
// and an older ledgerctl's reconcile --repair not refused. Both raise it
// first now.
func TestReviewS25F3_LedgerctlSaysProtocol4BeforeItsFirstFence(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	protocol := func(tbl string) int64 {
		f, err := ledgertable.GetFlags(ctx, c, tbl)
		require.NoError(t, err)
		require.True(t, f.Exists)
		return f.Protocol
	}

	t.Run("replay", func(t *testing.T) {
		tbl := ddbtest.NewTable(t, c)
		env := map[string]string{"LEDGER_TABLE": tbl, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
		require.Zero(t, protocol(tbl), "a new table's flags name no protocol")
		code, out, errOut := run(t, env, "replay", filepath.Join(fixtureEvents, "insert-basics.json"))
		require.Equal(t, exitOK, code, out+errOut)
		fenced := 0
		scan, err := c.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(tbl), ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		for _, item := range scan.Items {
			if ledgertable.FencedHead(item) {
				fenced++
			}
		}
		require.Positive(t, fenced, "replay fenced the heads it updated")
		assert.Equal(t, int64(ledgertable.Protocol), protocol(tbl), "the flags say so")
	})

	t.Run("abandon-batch", func(t *testing.T) {
		tbl := ddbtest.NewTable(t, c)
		coord := ledgertable.CoordinationTableName(tbl)
		env := map[string]string{"LEDGER_TABLE": tbl, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
		arn, err := poller.ResolveStream(ctx, c, tbl)
		require.NoError(t, err)
		const shard, prev, to = "shardId-3", "000000000000000000042", "000000000000000000077"
		key := aggregates.CheckpointKey(arn, shard)
		item := ledgertable.Key(key)
		for k, v := range map[string]ddbtypes.AttributeValue{
			ledgertable.AttrEntityType: ledgertable.S(aggregates.EntityCheckpoint), ledgertable.AttrShardID: ledgertable.S(shard),
			ledgertable.AttrSequenceNumber: ledgertable.S(prev), ledgertable.AttrUpdatedAt: ledgertable.S(time.Now().UTC().Format(time.RFC3339Nano)),
			"pendingTo": ledgertable.S(to), "pendingNext": ledgertable.Int(2), "pendingGroups": ledgertable.Int(5),
			"pendingPlan": ledgertable.S("99/32/6/32"), "pendingDigest": ledgertable.S("d"), "legacyTombstone": ledgertable.S(tbl),
		} {
			item[k] = v
		}
		_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: item})
		require.NoError(t, err)
		require.Zero(t, protocol(tbl))
		code, out, errOut := run(t, env, "abandon-batch", "--shard", shard, "--to", to, "--next", "2")
		require.Equal(t, exitOK, code, out+errOut)
		got, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord), Key: ledgertable.Key(key), ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		cp, err := ledgertable.DecodeCheckpoint(shard, got.Item)
		require.NoError(t, err)
		require.Equal(t, int64(ledgertable.Protocol), cp.Fence, "the abandon fenced the checkpoint")
		assert.Equal(t, int64(ledgertable.Protocol), protocol(tbl), "the flags say so")
	})
}
