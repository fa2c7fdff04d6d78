package compact_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/compact"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/table"
)

// BenchmarkCompact_Retire measures how many tombstones a run retires a
// second, one at a time and Parallel at a time (the adversarial review
// of session 16, C16-3: one at a time, a run retires fewer than one tenant
// at its write budget can delete). Each iteration retires 200 tombstones
// over 1 or 8 branches (a branch's own are retired one at a time: each
// updates its applied item); DynamoDB Local's latency is not AWS's, so the figure to
// read is the ratio between the two:
//
//	go test -run '^$' -bench Compact_Retire -benchtime 3x ./compact/
func BenchmarkCompact_Retire(b *testing.B) {
	const perRun = 200
	ctx := context.Background()
	api := ddbtest.Client(b)
	tbl := tables.Table(b)
	coord := table.CoordinationTableName(tbl)
	seq := 0
	for _, tc := range []struct{ branches, parallel int }{{1, 1}, {1, compact.DefaultParallel}, {8, 1}, {8, compact.DefaultParallel}} {
		b.Run(fmt.Sprintf("branches=%d/parallel=%d", tc.branches, tc.parallel), func(b *testing.B) {
			parallel := tc.parallel
			var spent time.Duration
			for range b.N {
				seq++
				for i := range perRun {
					branch := fmt.Sprintf("bench%d-%d", seq, i%tc.branches)
					id := fmt.Sprintf("01JD0000000000000000%06d", i)
					k := aggregates.TransactionKey("acme", branch, aggregates.Date{Year: 2026, Month: 11, Day: 20}, id)
					item := table.Key(k)
					item[table.AttrEntityType] = table.S(aggregates.EntityTransaction)
					item[table.AttrID] = table.S(id)
					item[table.AttrCreatedAt] = table.S("2026-11-20T12:00:00Z")
					item[table.AttrDeletedAt] = table.S(now.Add(-72 * time.Hour).Format(time.RFC3339Nano))
					table.Count(item, 2)
					if _, err := api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &tbl, Item: item}); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				res, err := compact.Run(ctx, api, tbl, coord, compact.Options{Now: func() time.Time { return now }, Parallel: parallel})
				spent += time.Since(start)
				if err != nil || res.Compacted != perRun {
					b.Fatalf("retired %d of %d: %v", res.Compacted, perRun, err)
				}
			}
			b.ReportMetric(float64(perRun*b.N)/spent.Seconds(), "tombstones/s")
		})
	}
}
