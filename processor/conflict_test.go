package processor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ddbconflict"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/handler"
	"github.com/ledger-dev/ledger/table"
)

// A tumbling window's final invocation over records without effect moves
// the shard's checkpoint outside a commit (a single-item UpdateItem of the
// coordination table). On AWS, while a transaction holds the checkpoint
// (a commit of the shard by a stale consumer), that write fails with
// TransactionConflictException, which the SDK does not retry. It is
// retried (ledger_dynamodb_retries_total{operation="UpdateItem",
// reason="conflict"}) and lands once the item is free; before, it failed
// the invocation as a permanent error. The hold is released by the second
// refusal the consumer receives, so exactly two are counted.
func TestTumblingWindow_CheckpointMoveMeetingAHeldCheckpointIsRetried(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	shard, recs := e.records(t)
	require.NotEmpty(t, recs, "the default flags item's record")
	ev, err := processor.ToLambda(recs[0]) // no effect: not a transaction
	require.NoError(t, err)
	coord := table.CoordinationTableName(e.table)

	hold := ddbconflict.NewHolder("UpdateItem", 2)
	emu := &ddbconflict.Transport{Next: http.DefaultTransport}
	hold.Install(emu)
	consumer := dynamodb.NewFromConfig(ddbtest.Config(t, infra.WithTransportWrapper(func(http.RoundTripper) http.RoundTripper { return hold.Counting(emu) })),
		func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	other := ddbtest.Client(t, infra.WithTransportWrapper(func(http.RoundTripper) http.RoundTripper { return emu }))

	// The other transaction holds the shard's checkpoint.
	odone := make(chan error, 1)
	hold.Arm()
	go func() {
		_, err := other.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems: ddbconflict.AlwaysHolds(coord, table.Key(aggregates.CheckpointKey(e.streamARN, shard)))})
		odone <- err
	}()
	<-hold.Held()

	reg := prometheus.NewRegistry()
	m := processor.NewMetrics(reg)
	p, err := processor.New(consumer, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}, m)
	require.NoError(t, err)
	h, err := handler.New(p, handler.Config{Mode: handler.Tumbling, Streams: e.streams})
	require.NoError(t, err)
	payload, err := json.Marshal(events.DynamoDBTimeWindowEvent{
		DynamoDBEvent: events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{ev}},
		TimeWindowProperties: events.TimeWindowProperties{ShardID: shard, EventSourceARN: e.streamARN, IsFinalInvokeForWindow: true,
			Window: events.Window{Start: events.RFC3339EpochTime{Time: time.Unix(1700000000, 0)}, End: events.RFC3339EpochTime{Time: time.Unix(1700000060, 0)}}},
	})
	require.NoError(t, err)
	out, err := h.Invoke(ctx, payload)
	require.NoError(t, err)
	var resp events.DynamoDBTimeWindowEventResponse
	require.NoError(t, json.Unmarshal(out, &resp))
	assert.Empty(t, resp.BatchItemFailures, "the invocation succeeded")
	require.NoError(t, <-odone)

	_, rejected := emu.Stats()
	assert.Equal(t, int64(2), rejected, "the emulation refused the checkpoint move twice")
	assert.Equal(t, 2.0, testutil.ToFloat64(m.Retries.WithLabelValues("UpdateItem", "conflict")))
	g := p.ShardGuard(e.streamARN, shard)
	cp, err := g.Checkpoint(ctx)
	require.NoError(t, err)
	assert.Equal(t, ev.Change.SequenceNumber, cp, "the checkpoint moved over the record")
}

// The randomized exactly-once delivery (deliverShard: crashes, lost
// answers, restarts from older positions, and phases where two consumers
// commit one shard at once from the same checkpoint, a take-over's stale
// committer beside the new owner) with AWS's transaction conflicts
// emulated between the faults and DynamoDB Local (15 ms per transaction):
// the two consumers' commits of one checkpoint and one report item now
// cancel each other as on AWS, and the reports still equal the fold of the
// table (runRandomized's reconcile and calendar oracles).
func TestExactlyOnce_RandomizedDeliveryUnderAWSConflicts(t *testing.T) {
	seed := seeds(t)[0]
	// Shard mode only: its concurrent phases are the ones that meet, and
	// batch mode under the emulation took 275 s here against 78 s.
	for _, mode := range []string{"shard"} {
		t.Run(fmt.Sprintf("%s/seed=%d", mode, seed), func(t *testing.T) {
			ddbtest.Long(t)
			emu := &ddbconflict.Transport{Latency: 15 * time.Millisecond}
			runRandomized(t, mode, seed, func(e *env) {
				emu.Next, e.faults.Next = e.faults.Next, emu
			})
			cancelled, rejected := emu.Stats()
			t.Logf("AWS conflicts emulated: %d transactions cancelled, %d single-item writes refused", cancelled, rejected)
			assert.Positive(t, cancelled, "two consumers of one shard met")
		})
	}
}
