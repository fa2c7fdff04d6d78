package main

import (
	"context"
	"io"
	"maps"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// streamEnd reads DynamoDB Local's one shard from its start and returns its
// id and the sequence number of its last record.
func streamEnd(t *testing.T, arn string) (shard, last string) {
	t.Helper()
	ctx := context.Background()
	sc := dynamodbstreams.NewFromConfig(ddbtest.Config(t))
	d, err := sc.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &arn})
	require.NoError(t, err)
	require.Len(t, d.StreamDescription.Shards, 1, "DynamoDB Local has one shard")
	shard = aws.ToString(d.StreamDescription.Shards[0].ShardId)
	it, err := sc.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &arn, ShardId: &shard, ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon})
	require.NoError(t, err)
	iter := it.ShardIterator
	for iter != nil {
		out, err := sc.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
		require.NoError(t, err)
		for _, r := range out.Records {
			last = aws.ToString(r.Dynamodb.SequenceNumber)
		}
		if len(out.Records) == 0 {
			break
		}
		iter = out.NextShardIterator
	}
	return shard, last
}

// coordinationItem reads an item of the table's coordination table.
func coordinationItem(t *testing.T, tableName string, k aggregates.Key) map[string]ddbtypes.AttributeValue {
	t.Helper()
	out, err := ddbtest.Client(t).GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table.CoordinationTableName(tableName)), Key: table.Key(k), ConsistentRead: aws.Bool(true),
	})
	require.NoError(t, err)
	return out.Item
}

// checkpointAt is the position of shard's checkpoint in either layout
// (protocol 4's fence: pos), and whether it has one.
func checkpointAt(t *testing.T, tableName, arn, shard string) (string, bool) {
	t.Helper()
	cp, _ := table.DecodeCheckpoint(shard, coordinationItem(t, tableName, aggregates.CheckpointKey(arn, shard)))
	return cp.Seq, cp.Seq != ""
}

// runPoller runs the poller in this process until the returned stop is
// called; stop returns its exit code.
func runPoller(t *testing.T, tableName string, logs io.Writer, args ...string) (stop func() int) {
	t.Helper()
	env := map[string]string{"AWS_ENDPOINT_URL": ddbtest.Endpoint(t), "LEDGER_TABLE": tableName}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, append([]string{"--metrics-addr", "127.0.0.1:0", "--log-format", "json"}, args...),
			func(k string) string { return env[k] }, io.Discard, logs)
	}()
	var code *int
	t.Cleanup(func() {
		if code == nil {
			cancel()
			<-done
		}
	})
	return func() int {
		cancel()
		c := <-done
		code = &c
		return c
	}
}

// An idle stream goes quiet: once the poller has committed the last change
// and moved its checkpoint over the records its own commits made, its
// heartbeats, lease writes and checkpoint moves land in the coordination table, which has
// no stream, so the ledger table's stream gets no record more however long
// it runs. Before the coordination table, every renewal and checkpoint
// move was a record of the stream being read: an idle stream was never
// empty.
func TestRun_AnIdleStreamGoesQuiet(t *testing.T) {
	ctx := context.Background()
	tableName := newTableName(t)
	db := ddbtest.Client(t)
	require.NoError(t, ledgertest.NewWorkload(7).Run(ctx, db, tableName, 60))
	arn, err := poller.ResolveStream(ctx, db, tableName)
	require.NoError(t, err)
	logs := &syncBuffer{}
	// 3 s leases (a heartbeat a second): with 900 ms ones, at load 11 every
	// heartbeat timed out and the poller paused before it caught up.
	stop := runPoller(t, tableName, logs, "--lease-duration", "3s", "--checkpoint-interval", "100ms", "--owner", "quiet")

	// Caught up: the checkpoint is at the stream's last record (the reports
	// the commits wrote included), and still is half a second later.
	// DynamoDB Local applies a commit's actions one after another, the
	// checkpoint claim first, so a read between them saw the checkpoint at
	// the stream's end before the commit's 20 report records reached the
	// stream (a loaded run: "caught up" at …177, then …197 "written while
	// idle": the commit's own records, read and passed over at once).
	var shard, last string
	checkpoint := func() string {
		cp, _ := checkpointAt(t, tableName, arn, shard)
		return cp
	}
	require.Eventually(t, func() bool {
		shard, last = streamEnd(t, arn)
		if last == "" || checkpoint() != last {
			return false
		}
		time.Sleep(500 * time.Millisecond)
		_, again := streamEnd(t, arn)
		return again == last && checkpoint() == last
	}, 60*time.Second, 100*time.Millisecond, "poller never caught up:\n%s", logs)

	// Several heartbeats (which keep the lease) and checkpoint intervals
	// later, nothing new.
	beat := func() int64 {
		n, _ := table.Int64(coordinationItem(t, tableName, aggregates.WorkerKey(arn, "quiet")), table.AttrWorkerBeat)
		return n
	}
	from := beat()
	require.Eventually(t, func() bool { return beat() >= from+4 }, 30*time.Second, 50*time.Millisecond, "no heartbeats:\n%s", logs)
	_, after := streamEnd(t, arn)
	assert.Equal(t, last, after, "records written to the stream while it was idle")

	assert.Equal(t, exitOK, stop(), logs.String())
	requireReconciled(t, tableName)
}

// A stream whose checkpoints an earlier version kept in the ledger table
// (STREAM#{arn} / SHARD#{shard}) is refused until `ledgerctl coordination
// migrate` moved them; after the move the poller goes on from the moved
// checkpoint, applying nothing twice.
func TestRun_RefusesCheckpointsInTheLedgerTableUntilMigrated(t *testing.T) {
	ctx := context.Background()
	tableName := newTableName(t)
	db := ddbtest.Client(t)
	w := ledgertest.NewWorkload(8)
	require.NoError(t, w.Run(ctx, db, tableName, 80))
	arn, err := poller.ResolveStream(ctx, db, tableName)
	require.NoError(t, err)

	// An earlier version's state: commit everything, then put the
	// checkpoint and the lease where that version kept them.
	logs := &syncBuffer{}
	stop := runPoller(t, tableName, logs, "--lease-duration", "900ms", "--checkpoint-interval", "100ms", "--owner", "old")
	var shard string
	require.Eventually(t, func() bool {
		var last string
		shard, last = streamEnd(t, arn)
		cp, _ := checkpointAt(t, tableName, arn, shard)
		return last != "" && cp == last
	}, 60*time.Second, 100*time.Millisecond, "poller never caught up:\n%s", logs)
	require.Equal(t, exitOK, stop(), logs.String())
	coord := table.CoordinationTableName(tableName)
	for _, k := range []aggregates.Key{aggregates.CheckpointKey(arn, shard), aggregates.LeaseKey(arn, shard)} {
		item := maps.Clone(coordinationItem(t, tableName, k))
		require.NotNil(t, item, k.String())
		if pos, ok := item[table.AttrPos]; ok {
			// The earlier version's layout: no fence of protocol 4.
			item[table.AttrSequenceNumber] = pos
			delete(item, table.AttrPos)
			delete(item, table.AttrCountedTo)
		}
		legacy := aggregates.Key{PK: "STREAM#" + arn, SK: k.SK}
		maps.Copy(item, table.Key(legacy))
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(tableName), Item: item})
		require.NoError(t, err)
		_, err = db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(coord), Key: table.Key(k)})
		require.NoError(t, err)
	}
	require.NoError(t, w.Run(ctx, db, tableName, 40))

	refused := &syncBuffer{}
	env := map[string]string{"AWS_ENDPOINT_URL": ddbtest.Endpoint(t), "LEDGER_TABLE": tableName}
	code := Run(ctx, []string{"--metrics-addr", "127.0.0.1:0", "--log-format", "json", "--owner", "new"},
		func(k string) string { return env[k] }, io.Discard, refused)
	assert.Equal(t, exitError, code)
	assert.Contains(t, refused.String(), "ledgerctl coordination migrate")

	// A lease that looks held stops the move; a released one does not.
	leaseKey := table.Key(aggregates.Key{PK: "STREAM#" + arn, SK: aggregates.LeaseKey(arn, shard).SK})
	_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(tableName), Key: leaseKey,
		UpdateExpression:          aws.String("SET #o = :o, #x = :x"),
		ExpressionAttributeNames:  map[string]string{"#o": table.AttrLeaseOwner, "#x": table.AttrLeaseExpiry},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":o": table.S("still-running"), ":x": table.S(time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))},
	})
	require.NoError(t, err)
	_, err = table.MigrateStreamState(ctx, db, tableName, coord, arn, time.Now(), table.MigrateOptions{})
	require.ErrorIs(t, err, table.ErrConsumerRunning)
	_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(tableName), Key: leaseKey, UpdateExpression: aws.String("REMOVE #o"),
		ExpressionAttributeNames: map[string]string{"#o": table.AttrLeaseOwner},
	})
	require.NoError(t, err)
	res, err := table.MigrateStreamState(ctx, db, tableName, coord, arn, time.Now(), table.MigrateOptions{})
	require.NoError(t, err)
	assert.Equal(t, table.MigrateResult{Checkpoints: 1, Leases: 1}, res)
	found, err := table.LegacyStreamState(ctx, db, tableName, arn)
	require.NoError(t, err)
	assert.False(t, found)
	again, err := table.MigrateStreamState(ctx, db, tableName, coord, arn, time.Now(), table.MigrateOptions{})
	require.NoError(t, err)
	assert.Equal(t, table.MigrateResult{}, again, "a second move has nothing to do")

	logs = &syncBuffer{}
	stop = runPoller(t, tableName, logs, "--lease-duration", "900ms", "--checkpoint-interval", "100ms", "--owner", "new")
	require.Eventually(t, func() bool {
		_, last := streamEnd(t, arn)
		cp, _ := checkpointAt(t, tableName, arn, shard)
		return cp == last
	}, 60*time.Second, 100*time.Millisecond, "poller never caught up after the move:\n%s", logs)
	require.Equal(t, exitOK, stop(), logs.String())
	requireReconciled(t, tableName)
}
