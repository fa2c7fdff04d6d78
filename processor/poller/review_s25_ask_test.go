package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// Review (session 25), S25-A1: a drain's request landed on a lease
// (pendingOwner = the drain) whose ask in its heartbeat owner's worker
// item was lost. Seen in CI (TestPoller_TheGiversDoNotOvershootAJoinerWhoseHeartbeatLags):
// a stopping joiner handed the lease to d, the drain asked d for it, d
// answered that ask before it had taken the lease (not held: cleared), the
// drain asked again once d held it, and d's clear of the first ask took
// the second with it (the asks are a set). The lease kept the drain's
// request, so the drain asked no more (it asks only for leases nobody
// asked for), d reads none of its lease items, and the drain waited for
// the lease until its 5 minutes ran out. Here the lost ask is made
// directly: the request on the lease, no ask in d's item. The drain now
// tells d again a renewal interval after its last ask while the lease
// still shows its request (retell).
func TestPoller_ReviewS25ADrainTellsAnOwnerAgainWhoseAskWasLost(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 251)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 50)...)
	d := e.poller(t, "d", nil, nil, nil)
	stop := start(t, d)
	defer stop()
	eventually(t, "d holds A", time.Minute, func() bool { return counter(t, d.m.LeasesHeld) == 1 })

	coord := table.CoordinationTableName(e.table)
	_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(coord), Key: table.Key(aggregates.LeaseKey(f.arn, "shardId-A")),
		UpdateExpression:          aws.String("SET #p = :d"),
		ConditionExpression:       aws.String("#o = :o"),
		ExpressionAttributeNames:  map[string]string{"#p": table.AttrLeasePending, "#o": table.AttrLeaseOwner},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":d": table.S("D"), ":o": table.S("d")},
	})
	require.NoError(t, err)
	f.appendTo("shardId-A", e.write(t, 20)...)

	// Not e.drain: its 5 minutes is the bound of a hang, this test's
	// failure mode; a minute is ample for a drain of one shard.
	tp := e.poller(t, "D", nil, nil, func(c *poller.Config) { c.Drain = true })
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, tp.Run(rctx))
	require.NoError(t, rctx.Err(), "the drain did not exit: d was never told of its request again")
	require.Positive(t, logged(tp.logs.lines(), "lease request told again"), "the drain told d again")
	e.requireReconciled(t)
}
