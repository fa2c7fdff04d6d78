package main

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// BenchmarkRollupRead_WaitingDeltaCheck measures what a tenant roll-up
// read (writer/rollups.go: one eventually consistent BatchGetItem of the
// K partials of a period) would pay to also say whether roll-up deltas
// wait for its cell (docs/exactly-once.md, S17-R1, "the read"): a delta
// item's key names its claim, not its currency or period, so the check is
// an eventually consistent Query of each of the tenant's K lanes, every
// item read. Reported per read, as DynamoDB Local's ReturnConsumedCapacity
// says: the month's read alone, the lanes empty (every delta folded), and
// the lanes holding the deltas of a 200-change workload not folded yet.
//
//	go test -run '^$' -bench BenchmarkRollupRead_WaitingDeltaCheck -benchtime 20x ./cmd/ledgerctl/
func BenchmarkRollupRead_WaitingDeltaCheck(b *testing.B) {
	ctx := context.Background()
	c := ddbtest.Client(b)
	table := ddbtest.NewTable(b, c)
	info, err := ledgertable.DescribeTable(ctx, c, table)
	require.NoError(b, err)
	consume := passer(b, c, info.StreamARN, processor.Config{Table: table})
	require.NoError(b, ledgertest.NewWorkload(11).Run(ctx, c, table, 200))
	consume() // stage 1: branch reports, deltas in the lanes
	consume() // stage 2: folded into the partials, the lanes empty

	// The busiest cell the workload left: a tenant, currency and month.
	var cell aggregates.RollupKey
	most := 0
	counts := map[aggregates.RollupKey]int{}
	scan, err := c.Scan(ctx, &dynamodb.ScanInput{TableName: &table})
	require.NoError(b, err)
	for _, item := range scan.Items {
		rk, err := aggregates.ParseRollupKey(ledgertable.KeyOf(item))
		if err != nil || rk.Period.Type != aggregates.Monthly {
			continue
		}
		rk.Lane = 0
		if counts[rk]++; counts[rk] > most {
			cell, most = rk, counts[rk]
		}
	}
	require.NotZero(b, most, "a monthly partial")

	monthRead := func() (units float64, requests int) {
		keys := make([]map[string]ddbtypes.AttributeValue, aggregates.RollupLanes)
		for lane := range aggregates.RollupLanes {
			k := cell
			k.Lane = lane
			keys[lane] = ledgertable.Key(k.Key())
		}
		out, err := c.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]ddbtypes.KeysAndAttributes{table: {Keys: keys}},
			ReturnConsumedCapacity: ddbtypes.ReturnConsumedCapacityTotal})
		require.NoError(b, err)
		require.Empty(b, out.UnprocessedKeys)
		for _, cc := range out.ConsumedCapacity {
			units += aws.ToFloat64(cc.CapacityUnits)
		}
		return units, 1
	}
	laneRead := func() (units float64, requests int) {
		for lane := range aggregates.RollupLanes {
			pk := aggregates.RollupLanePK(cell.Tenant, lane)
			var start map[string]ddbtypes.AttributeValue
			for {
				out, err := c.Query(ctx, &dynamodb.QueryInput{TableName: &table, KeyConditionExpression: aws.String("PK = :pk"),
					ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": ledgertable.S(pk)},
					ExclusiveStartKey:         start, ReturnConsumedCapacity: ddbtypes.ReturnConsumedCapacityTotal})
				require.NoError(b, err)
				requests++
				if out.ConsumedCapacity != nil {
					units += aws.ToFloat64(out.ConsumedCapacity.CapacityUnits)
				}
				if start = out.LastEvaluatedKey; start == nil {
					break
				}
			}
		}
		return units, requests
	}
	measure := func(name string, reads ...func() (float64, int)) {
		b.Run(name, func(b *testing.B) {
			var units float64
			var requests int
			for b.Loop() {
				for _, r := range reads {
					u, n := r()
					units += u
					requests += n
				}
			}
			b.ReportMetric(units/float64(b.N), "RU/read")
			b.ReportMetric(float64(requests)/float64(b.N), "requests/read")
		})
	}
	measure("month read", monthRead)
	measure("month read and lanes, empty", monthRead, laneRead)
	require.NoError(b, ledgertest.NewWorkload(12).Run(ctx, c, table, 200))
	consume() // stage 1 only: the deltas wait
	measure("month read and lanes, 200 changes waiting", monthRead, laneRead)
}
