package processor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// rolledBackAPI is DynamoDB Local behind one fault: a transaction that
// sends report k's count as a condition meets another transaction's write
// of k that is then rolled back, so the commit is cancelled on its count
// condition and the item read again is exactly the item it was sent on
// (count and updatedAt). DynamoDB Local does this when a committer's
// client went away mid-transaction (a reader stopped by a lease
// hand-over) and the next committer's transaction runs beside it: seen
// once in TestPoller_TwoPollersShareShardsFairlyAndHandOffOnShutdown at
// load 30, where two parts were parked as "nothing changed". times is how
// many such transactions meet it (0: every one).
type rolledBackAPI struct {
	countFlipAPI
	times int32
	met   atomic.Int32
}

func (a *rolledBackAPI) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if !a.holdsCountCondition(in) || a.times > 0 && a.met.Load() >= a.times {
		return a.DynamoDB.TransactWriteItems(ctx, in, opts...)
	}
	a.met.Add(1)
	before, err := a.DynamoDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: &a.table, Key: table.Key(a.k), ConsistentRead: aws.Bool(true)})
	require.NoError(a.t, err)
	a.commitCount(ctx, 1) // the other transaction's write, in flight
	out, err := a.DynamoDB.TransactWriteItems(ctx, in, opts...)
	// ... and rolled back: the item as it was, updatedAt included.
	_, perr := a.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: &a.table, Item: before.Item})
	require.NoError(a.t, perr)
	return out, err
}

// TestCommit_AConditionFailedOnAWriteRolledBackIsSentAgainBeforeParking:
// a part whose condition failed on an item a re-read finds unchanged is
// sent once more before it is parked (it used to be parked at once: a
// branch report short until `reconcile --repair`); a part that fails so
// again is parked, and the commit goes on.
func TestCommit_AConditionFailedOnAWriteRolledBackIsSentAgainBeforeParking(t *testing.T) {
	tests := []struct {
		name   string
		times  int32
		parked float64
	}{
		{name: "once: sent again, committed", times: 1, parked: 0},
		{name: "every time: parked after one more try", times: 0, parked: 1},
	}
	for _, tt := range tests {
		for _, mode := range []string{"marker", "batch"} {
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				e := newEnv(t)
				rtx{"acme", "sp", "BRL", "2026-11-27", "1", "INCOME", "10", "food"}.put(t, e, "")
				first := newConsumer(t, e, mode, nil, processor.Config{})
				first.pass() // the report's count is 1
				rtx{"acme", "sp", "BRL", "2026-11-27", "2", "INCOME", "5", "food"}.put(t, e, "")

				rk := aggregates.ReportKey{Tenant: "acme", Branch: "sp", Period: day("2026-11-27")}.Key()
				api := &rolledBackAPI{countFlipAPI: countFlipAPI{DynamoDB: e.ddb, t: t, table: e.table, k: rk}, times: tt.times}
				p, err := processor.New(api, processor.Config{Table: e.table, MaxAttempts: 2, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond},
					processor.NewMetrics(prometheus.NewRegistry()))
				require.NoError(t, err)
				c := takeOver(t, e, p, first)
				c.pass()
				require.Positive(t, api.met.Load(), "the fault met the count condition")

				assert.Equal(t, tt.parked, testutil.ToFloat64(p.Metrics().Parked.WithLabelValues(processor.ParkedRefused)))
				diffs, _, err := reconcileBranch(context.Background(), e, "acme", "sp")
				require.NoError(t, err)
				if tt.parked == 0 {
					assert.Empty(t, diffs, "the branch report holds both transactions")
					c.drain()
					requireRollupsExact(t, e, true)
				} else {
					require.NotEmpty(t, diffs, "the parked part is named")
				}
			})
		}
	}
}
