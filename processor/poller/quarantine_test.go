package poller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// invalidIDs returns the eventIDs of recs that get a quarantine item:
// transaction records whose new image is not a valid transaction.
func invalidIDs(recs []st.Record, arn string) map[string]bool {
	out := map[string]bool{}
	for _, sr := range recs {
		r := processor.FromStream(sr, arn)
		pk, _ := table.String(r.Keys, table.AttrPK)
		if !aggregates.IsTransactionKey(pk) || r.NewImage == nil {
			continue
		}
		if _, err := table.ParseTransaction(r.NewImage); err != nil {
			out[r.EventID] = true
		}
	}
	return out
}

// quarantineItems returns the eventIDs of the table's quarantine items.
func (e *env) quarantineItems(t testing.TB) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	var start map[string]ddbtypes.AttributeValue
	for {
		page, err := e.ddb.Scan(context.Background(), &dynamodb.ScanInput{TableName: &e.table, ExclusiveStartKey: start})
		require.NoError(t, err)
		for _, it := range page.Items {
			if pk, _ := table.String(it, table.AttrPK); strings.HasPrefix(pk, "QUARANTINE#") {
				id, _ := table.String(it, "eventID")
				out[id] = true
			}
		}
		if start = page.LastEvaluatedKey; start == nil {
			return out
		}
	}
}

// writeRequests sums the processor's write requests over operations.
func writeRequests(pm *processor.Metrics) float64 {
	total := 0.0
	for _, op := range []string{"TransactWriteItems", "PutItem", "UpdateItem"} {
		total += testutil.ToFloat64(pm.WriteRequests.WithLabelValues(op))
	}
	return total
}

// Issue 27: a single poller over a backlog where 15% of the records are
// invalid transactions, under 10% faulted writes (a third applied with the
// answer lost) and 5% faulted reads. Their quarantine items ride in the
// batches' commit transactions, so the checkpoint advances steadily (each
// move costs a few dozen write requests, where the per-record quarantine
// put cost one or more per invalid record before a batch's first commit),
// the poller catches up, every invalid record is quarantined exactly once
// (one item each, none put on its own, each write counted once, lost
// answers included), and the reports are exact.
func TestPoller_QuarantinesInvalidRecordsOnceAndKeepsItsPaceUnderFaults(t *testing.T) {
	ddbtest.Long(t)
	e := newEnv(t, 27)
	e.w.Invalid = 0.15
	const shard = "shardId-0"
	e.stream.addShard(shard, "")
	recs := e.backlog(t, 3000)
	e.stream.appendTo(shard, recs...)
	last := aws.ToString(recs[len(recs)-1].Dynamodb.SequenceNumber)
	want := invalidIDs(recs, e.stream.arn)
	require.Greater(t, len(want), 3000/10, "about 15% of the records are invalid")

	f := newFaults(27, 0.10, 0.05)
	p := e.pollerWith(t, "Q", faultyStreams{Streams: e.stream.client("Q"), f: f}, f.client(t), processor.Config{},
		func(c *poller.Config) {
			// Batches of 300 records (about 45 invalid): ten checkpoint
			// moves, and commits enough for the faults to hit.
			c.LeaseDuration, c.MaxRecords, c.BatchRecords = 15*time.Second, 100, 300
		})
	stop := start(t, p)

	// The checkpoint only moves forward, and every position it reaches
	// costs a bounded number of write requests (counted, not timed).
	var seen []string
	var gaps []float64
	at := 0.0
	eventually(t, "the checkpoint at the backlog's end", 10*time.Minute, func() bool {
		cp := e.checkpointOf(t, e.stream.arn, shard)
		if len(seen) == 0 || cp != seen[len(seen)-1] {
			if len(seen) > 0 {
				require.Positive(t, processor.CompareSequence(cp, seen[len(seen)-1]), "the checkpoint went back from %s to %s", seen[len(seen)-1], cp)
			}
			now := writeRequests(p.pm)
			if cp != "" {
				gaps = append(gaps, now-at)
			}
			seen, at = append(seen, cp), now
		}
		time.Sleep(5 * time.Millisecond)
		return cp == last
	})
	stop()

	t.Logf("%d records, %d invalid; faults: %d lost answers, %d dropped, %d throttled writes, %d failed reads; write requests between checkpoint positions: %v",
		len(recs), len(want), f.lost.Load(), f.dropped.Load(), f.throttled.Load(), f.readFaults.Load(), gaps)
	assert.GreaterOrEqual(t, len(gaps), 5, "the checkpoint advanced step by step")
	for _, g := range gaps {
		assert.LessOrEqual(t, g, 40.0, "a checkpoint move is not behind a round trip per invalid record (a batch holds about 45)")
	}
	assert.Zero(t, counter(t, p.pm.WriteRequests.WithLabelValues("PutItem")), "no quarantine item is put on its own")
	assert.Equal(t, want, e.quarantineItems(t), "every invalid record has its quarantine item")
	quarantined := 0.0
	mfs, err := p.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "ledger_quarantined_records_total" {
			for _, m := range mf.GetMetric() {
				quarantined += m.GetCounter().GetValue()
			}
		}
	}
	assert.Equal(t, float64(len(want)), quarantined, "each quarantine item written once")
	assert.Equal(t, float64(len(recs)), counter(t, p.m.Committed), "each record is goodput once")
	e.requireReconciled(t)
}
