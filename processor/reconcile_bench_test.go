package processor

import (
	"fmt"
	"testing"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// BenchmarkReconcileFold is reconcile's work per transaction item read:
// the item as the domain sees it, validated, folded into its three reports
// (50 branches, 90 days, 20 categories, like workload b).
func BenchmarkReconcileFold(b *testing.B) {
	items := make([]map[string]ddbtypes.AttributeValue, 10000)
	for i := range items {
		items[i] = txnImage(fmt.Sprintf("br%02d", i%50), fmt.Sprintf("2024-%02d-%02d", 1+i%3, 1+i%28), fmt.Sprint(i),
			[]string{"INCOME", "EXPENSE"}[i%2], fmt.Sprintf("%d.%02d", 1+i%997, i%100), fmt.Sprintf("category %d", i%20))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		fold := aggregates.NewFold()
		for _, item := range items {
			tx, err := aggregates.ParseTransaction(table.Image(item))
			if err != nil {
				b.Fatal(err)
			}
			fold.Add(tx, +1)
		}
	}
	b.ReportMetric(float64(b.N*len(items))/b.Elapsed().Seconds(), "transactions/s")
}
