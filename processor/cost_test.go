package processor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
)

// perRecordRequests is the floor of seed 003's per-record design: for every
// record, updateCounters on DAILY, MONTHLY and YEARLY (3 requests) plus the
// two-step breakdown update (initialise, then increment) for at least the
// category of at least... one period: 6 write requests is the least it pays.
const perRecordRequests = 6

// TestWriteCost_CoalescedCommitIsFarCheaperThanPerRecord measures DynamoDB
// write requests and write units per 1,000 stream records of the randomized
// workload at batch sizes 100 and 1,000, and holds the coalesced commit to at
// least 20 times fewer requests than the per-record floor at 1,000.
func TestWriteCost_CoalescedCommitIsFarCheaperThanPerRecord(t *testing.T) {
	ddbtest.Long(t)
	ctx := context.Background()
	e := newEnv(t)
	w := ledgertest.NewWorkload(42)
	require.NoError(t, w.Run(ctx, e.ddb, e.table, 3000))
	shard, recs := e.records(t)

	type row struct {
		batch                               int
		requests, units, billed, perRecords float64
	}
	var rows []row
	for _, batch := range []int{1000, 100} {
		// Each batch size gets its own table state: replay into a fresh
		// guard namespace by using a distinct shard id.
		p := e.processor(t, nil, nil)
		g := p.ShardGuard(e.streamARN, fmt.Sprintf("%s-batch%d", shard, batch))
		if batch != 1000 {
			// Reports already hold the first pass; measure on a fresh table.
			e2 := newEnv(t)
			require.NoError(t, ledgertest.NewWorkload(42).Run(ctx, e2.ddb, e2.table, 3000))
			var s2 string
			s2, recs = e2.records(t)
			p = e2.processor(t, nil, nil)
			g = p.ShardGuard(e2.streamARN, s2)
			defer e2.requireReconciled(t)
		}
		for i := 0; i < len(recs); i += batch {
			_, err := p.Process(ctx, g, recs[i:min(i+batch, len(recs))])
			require.NoError(t, err)
		}
		m := p.Metrics()
		req := testutil.ToFloat64(m.WriteRequests.WithLabelValues("TransactWriteItems")) + testutil.ToFloat64(m.WriteRequests.WithLabelValues("PutItem"))
		tx := testutil.ToFloat64(m.WriteUnits.WithLabelValues("TransactWriteItems"))
		q := testutil.ToFloat64(m.WriteUnits.WithLabelValues("PutItem"))
		rows = append(rows, row{batch: batch, requests: req, units: tx + q, billed: 2*tx + q, perRecords: float64(len(recs))})
	}
	e.requireReconciled(t)
	for _, r := range rows {
		per := 1000 / r.perRecords
		t.Logf("batch %4d: %d records; per 1,000 records: %.1f write requests (quarantine puts included), %.1f write units reported by DynamoDB Local, %.1f billed on AWS (transactional ×2); per-record floor: %d requests",
			r.batch, int(r.perRecords), r.requests*per, r.units*per, r.billed*per, perRecordRequests*1000)
	}
	at1000 := rows[0]
	ratio := perRecordRequests * at1000.perRecords / at1000.requests
	t.Logf("batch 1000: %.0f× fewer write requests than the per-record floor", ratio)
	assert.GreaterOrEqual(t, ratio, 20.0)
}

// BenchmarkDecodeFold measures the CPU path of a consumer: decode 10,000
// recorded Lambda-shaped records and fold them into per-report deltas.
func BenchmarkDecodeFold(b *testing.B) {
	raw := benchmarkEvent(b, 10000)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var ev events.DynamoDBEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			b.Fatal(err)
		}
		f := aggregates.NewFold()
		for _, r := range ev.Records {
			old, new := processor.Transactions(processor.FromLambda(r))
			f.AddChange(old, new)
		}
		if len(f.Keys()) == 0 {
			b.Fatal("nothing folded")
		}
	}
	b.ReportMetric(float64(b.N*10000)/b.Elapsed().Seconds(), "records/s")
}

// benchmarkEvent builds a Lambda event of n INSERT and MODIFY records of
// valid transactions (cached in testdata after the first build).
func benchmarkEvent(b *testing.B, n int) []byte {
	path := filepath.Join("testdata", fmt.Sprintf("bench-%d.json", n))
	if raw, err := os.ReadFile(path); err == nil {
		return raw
	}
	ev := events.DynamoDBEvent{}
	for i := 0; i < n; i++ {
		img := map[string]events.DynamoDBAttributeValue{
			"PK":         events.NewStringAttribute(aggregates.TransactionPK("acme", fmt.Sprintf("b%d", i%20))),
			"SK":         events.NewStringAttribute(fmt.Sprintf("2024-%02d-%02d#t%d", 1+i%12, 1+i%28, i)),
			"entityType": events.NewStringAttribute("TRANSACTION"),
			"type":       events.NewStringAttribute([]string{"INCOME", "EXPENSE"}[i%2]),
			"amount":     events.NewNumberAttribute(fmt.Sprintf("%d.%02d", i%1000, i%100)),
			"category":   events.NewStringAttribute(fmt.Sprintf("cat%d", i%15)),
			"costCenter": events.NewStringAttribute(fmt.Sprintf("cc%d", i%5)),
			"createdAt":  events.NewStringAttribute(fmt.Sprintf("2024-%02d-%02dT10:00:00Z", 1+i%12, 1+i%28)),
		}
		rec := events.DynamoDBEventRecord{EventID: fmt.Sprintf("e%d", i), EventName: "INSERT",
			Change: events.DynamoDBStreamRecord{Keys: map[string]events.DynamoDBAttributeValue{"PK": img["PK"], "SK": img["SK"]},
				NewImage: img, SequenceNumber: fmt.Sprintf("%021d", i), StreamViewType: "NEW_AND_OLD_IMAGES"}}
		if i%3 == 0 {
			rec.EventName = "MODIFY"
			old := map[string]events.DynamoDBAttributeValue{}
			for k, v := range img {
				old[k] = v
			}
			old["amount"] = events.NewNumberAttribute("1.5")
			rec.Change.OldImage = old
		}
		ev.Records = append(ev.Records, rec)
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}
