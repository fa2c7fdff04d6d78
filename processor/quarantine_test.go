package processor_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/handler"
	"github.com/ledger-dev/ledger/table"
)

// writeFaults fails writes at rate w (a third applied with the answer
// lost, a third dropped, a third throttled) and reads at rate r (dropped
// or throttled), from a seeded die.
func writeFaults(seed uint64, w, r float64) func(op string) ledgertest.Fault {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 27))
	return func(op string) ledgertest.Fault {
		mu.Lock()
		x := rng.Float64()
		mu.Unlock()
		switch op {
		case "TransactWriteItems", "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem":
			switch {
			case x < w/3:
				return ledgertest.LoseAnswer
			case x < 2*w/3:
				return ledgertest.Drop
			case x < w:
				return ledgertest.Throttle
			}
		default:
			switch {
			case x < r/2:
				return ledgertest.Drop
			case x < r:
				return ledgertest.Throttle
			}
		}
		return ledgertest.Pass
	}
}

// needQuarantine returns the ids of recs' records that get a quarantine
// item: transaction records whose new image is not a valid transaction.
func needQuarantine(t *testing.T, recs []processor.Record) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, r := range recs {
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

// quarantineIDs returns the eventIDs of the table's quarantine items.
func quarantineIDs(t *testing.T, e *env) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	var start map[string]ddbtypes.AttributeValue
	for {
		page, err := e.ddb.Scan(context.Background(), &dynamodb.ScanInput{TableName: &e.table, ExclusiveStartKey: start})
		require.NoError(t, err)
		for _, it := range page.Items {
			if pk, _ := table.String(it, table.AttrPK); strings.HasPrefix(pk, "QUARANTINE#") {
				id, _ := table.String(it, "eventID")
				require.False(t, out[id], "one quarantine item per record")
				out[id] = true
			}
		}
		if start = page.LastEvaluatedKey; start == nil {
			return out
		}
	}
}

func sumCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// A Lambda batch (standard mode) or window (tumbling mode) holding hundreds
// of invalid records, under 10% faulted writes (a third applied with the
// answer lost, the first commit's certainly) and 5% faulted reads: their
// quarantine items ride in the
// commit transactions, so the batch commits in a few dozen requests (the
// per-record quarantine put cost one request per invalid record, with
// retries: hundreds), each invalid record gets exactly one quarantine item,
// written once (the metric counts each once, lost answers included), and
// the reports are exact. Round trips are counted, not seconds.
func TestLambda_HundredsOfInvalidRecordsCommitInFewRoundTripsUnderFaults(t *testing.T) {
	for _, mode := range []handler.Mode{handler.Standard, handler.Tumbling} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			w := ledgertest.NewWorkload(27)
			w.Invalid = 0.6
			require.NoError(t, w.Run(ctx, e.ddb, e.table, 500))
			shard, recs := e.records(t)
			want := needQuarantine(t, recs)
			require.Greater(t, len(want), 250, "hundreds of invalid records")

			// The dice, and the first commit certainly loses its answer
			// (applied): its quarantine items are recognised as its own.
			dice, first := writeFaults(27, 0.10, 0.05), true
			e.faults.Decide = func(op string) ledgertest.Fault {
				if op == "TransactWriteItems" && first {
					first = false
					return ledgertest.LoseAnswer
				}
				return dice(op)
			}
			reg := prometheus.NewRegistry()
			p := e.processor(t, reg, e.faulty)
			h, err := handler.New(p, handler.Config{Mode: mode, Streams: e.streams})
			require.NoError(t, err)
			batch := make([]events.DynamoDBEventRecord, len(recs))
			for i := range recs {
				batch[i], err = processor.ToLambda(recs[i])
				require.NoError(t, err)
			}
			// The event source mapping's loop: redeliver from the first
			// failure (standard), or the same window again (tumbling),
			// until the batch is acknowledged.
			var state map[string]string
			invocations := 0
			for len(batch) > 0 {
				invocations++
				require.LessOrEqual(t, invocations, 5, "the batch is acknowledged within a few invocations")
				var payload []byte
				if mode == handler.Tumbling {
					payload, err = json.Marshal(events.DynamoDBTimeWindowEvent{
						DynamoDBEvent: events.DynamoDBEvent{Records: batch},
						TimeWindowProperties: events.TimeWindowProperties{
							State: state, ShardID: shard, EventSourceARN: e.streamARN, IsFinalInvokeForWindow: true,
							Window: events.Window{Start: events.RFC3339EpochTime{Time: time.Unix(1700000000, 0)},
								End: events.RFC3339EpochTime{Time: time.Unix(1700000060, 0)}},
						},
					})
				} else {
					payload, err = json.Marshal(events.DynamoDBEvent{Records: batch})
				}
				require.NoError(t, err)
				out, err := h.Invoke(ctx, payload)
				if err != nil {
					t.Logf("invocation %d failed: %v", invocations, err)
					continue
				}
				var resp events.DynamoDBTimeWindowEventResponse
				require.NoError(t, json.Unmarshal(out, &resp))
				if len(resp.BatchItemFailures) == 0 {
					break
				}
				if mode == handler.Standard {
					first := resp.BatchItemFailures[0].ItemIdentifier
					for len(batch) > 0 && batch[0].Change.SequenceNumber != first {
						batch = batch[1:]
					}
				}
				state = resp.State
			}

			tx, puts := e.faults.Calls("TransactWriteItems"), e.faults.Calls("PutItem")
			t.Logf("%s: %d records, %d invalid; %d invocations; requests: %d TransactWriteItems, %d PutItem, %d GetItem, %d BatchGetItem, %d UpdateItem",
				mode, len(recs), len(want), invocations, tx, puts, e.faults.Calls("GetItem"), e.faults.Calls("BatchGetItem"), e.faults.Calls("UpdateItem"))
			assert.Zero(t, puts, "no quarantine item is put on its own")
			assert.LessOrEqual(t, tx, 40, "the invalid records' quarantine items ride in the commits")
			assert.Equal(t, want, quarantineIDs(t, e), "every invalid record quarantined, once")
			assert.Equal(t, float64(len(want)), sumCounter(t, reg, "ledger_quarantined_records_total"), "each quarantine item written once")
			e.requireReconciled(t)
		})
	}
}

// A quarantine item that exists before the commit that claims its record
// (put by an earlier version before its commit landed, or by hand) fails
// its condition inside the transaction: the commit drops that put and
// lands the rest, the item keeps what it holds, and the metric counts only
// the items this commit wrote. Under both guards (runs, and batches).
func TestCommit_AQuarantineItemThatExistsIsKeptAndBlocksNothing(t *testing.T) {
	for _, kind := range []string{"marker", "checkpoint"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			w := ledgertest.NewWorkload(28)
			w.Invalid = 0.5
			require.NoError(t, w.Run(ctx, e.ddb, e.table, 40))
			shard, recs := e.records(t)
			want := needQuarantine(t, recs)
			require.Greater(t, len(want), 10)
			var early []string
			for _, r := range recs {
				if want[r.EventID] && len(early) < 3 {
					early = append(early, r.EventID)
					_, err := e.ddb.PutItem(ctx, table.PutQuarantine(e.table, table.QuarantineItem(table.Quarantined{
						ID: r.EventID, EventID: r.EventID, Reason: "earlier", At: "2000-01-01T00:00:00Z", Record: "{}",
					})))
					require.NoError(t, err)
				}
			}

			reg := prometheus.NewRegistry()
			p := e.processor(t, reg, nil)
			var g processor.Guard = p.MarkerGuard()
			if kind == "checkpoint" {
				sg := p.ShardGuard(e.streamARN, shard)
				sg.CommitBatches()
				g = sg
			}
			res, err := p.Process(ctx, g, recs)
			require.NoError(t, err)
			assert.Equal(t, len(recs), res.Committed)
			assert.Equal(t, len(want), res.Quarantined)
			assert.Equal(t, want, quarantineIDs(t, e))
			for _, id := range early {
				out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &e.table, Key: table.Key(aggregates.QuarantineKey(id))})
				require.NoError(t, err)
				at, _ := table.String(out.Item, table.AttrQuarantinedAt)
				assert.Equal(t, "2000-01-01T00:00:00Z", at, "the item that existed is not rewritten")
			}
			assert.Equal(t, float64(len(want)-len(early)), sumCounter(t, reg, "ledger_quarantined_records_total"))
			assert.Zero(t, sumCounter(t, reg, "ledger_aggregate_conflicts_total"), "an item that exists is no conflict")
			e.requireReconciled(t)
		})
	}
}
