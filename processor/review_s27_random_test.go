package processor_test

import (
	"context"
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

// checkpointHook runs before, once, before the first read of the checkpoint item
// key, then reads it.
type checkpointHook struct {
	processor.RebaseAPI
	key    aggregates.Key
	before func()
}

func (h *checkpointHook) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	pk, _ := table.String(in.Key, table.AttrPK)
	sk, _ := table.String(in.Key, table.AttrSK)
	if h.before != nil && pk == h.key.PK && sk == h.key.SK {
		h.before()
		h.before = nil
	}
	return h.RebaseAPI.GetItem(ctx, in, opts...)
}

// Session 27, found by the randomized test with kills (cmd/lambda,
// TumblingMode_CountedRepairsAtRandomMomentsWhileKilled): R0 reads the
// applied item and finds an open mark; refuseOpen then reads the mark's
// checkpoint to tell a pending batch from an abandoned one. A batch whose
// last transaction lands between the two reads (it removes the mark and
// the checkpoint's pending batch together) is named "of batches no longer
// pending (abandoned): only a rebase removes them; rebase", though nothing
// is left to remove and the next repair runs. Nothing is written either
// way (the refusal is safe); the name sends an operator to a rebase that
// is not needed. Here the batch is finished by its resumer right before
// the checkpoint read (its branch's writes are not the writer's: only the
// name is checked). Without the skip it fails on that name (checked,
// session 27).
func TestReviewS27_AnOpenMarkWhoseBatchFinishesDuringTheCheckIsNotCalledAbandoned(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	batch6Txs(t, e, 120)
	recs, _ := crashMidBatch6(t, e, false)
	tenant, branch := openMarkBranch(t, e)
	_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(table.CoordinationTableName(e.table)), Key: table.Key(aggregates.AppliedKey(tenant, branch)),
		UpdateExpression:          aws.String("SET #fat = :now, #fa = if_not_exists(#f, :z)"),
		ExpressionAttributeNames:  map[string]string{"#fat": table.AttrFencedAt, "#fa": table.AttrForeignAck, "#f": table.AttrForeign},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":now": sAV("2026-11-28T00:00:00Z"), ":z": nAV("0")}})
	require.NoError(t, err)

	c := newConsumer(t, e, "batch", nil, processor.Config{})
	api := &checkpointHook{RebaseAPI: e.ddb, key: aggregates.CheckpointKey(e.streamARN, shardOf(t, e)), before: func() {
		c.deliver(recs...) // the resumer finishes the batch: mark and pending batch gone
	}}
	_, err = processor.CountedRepair(ctx, api, e.table, processor.CountedRepairOptions{
		Tenant: tenant, Branch: branch, StreamARN: e.streamARN, Log: t.Logf})
	require.Nil(t, api.before, "the batch finished during the check")
	require.Empty(t, appliedOf(t, e, tenant, branch).Open, "no mark left")
	if err != nil {
		t.Log(err)
		assert.NotContains(t, err.Error(), "no longer pending (abandoned)", "the batch finished: nothing for a rebase to remove")
	}
}
