package processor_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// This file pins step A of counted changes for the standard-mode runs
// (docs/exactly-once.md, "The design: counted changes", A): every run's
// transaction counts the records of transaction partitions it claims into
// their branches' applied items in the coordination table.

// putCounted writes branch x's transaction id as the writer does: the
// count after changes and its sig (table.Count).
func putCounted(t *testing.T, e *env, id, amount string, changes int64) {
	t.Helper()
	k := aggregates.Key{PK: aggregates.TransactionPK("t", "x"), SK: "2024-04-01#" + id}
	item := map[string]ddbtypes.AttributeValue{
		"PK": sAV(k.PK), "SK": sAV(k.SK), "entityType": sAV(aggregates.EntityTransaction),
		"type": sAV("INCOME"), "amount": nAV(amount), "category": sAV("rent"),
		"createdAt": sAV("2024-04-01T12:00:00Z"), "version": nAV(fmt.Sprint(changes)),
	}
	table.Count(item, changes)
	_, err := e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &e.table, Item: item})
	require.NoError(t, err)
}

func appliedOf(t *testing.T, e *env, tenant, branch string) table.Applied {
	t.Helper()
	a, err := table.GetApplied(context.Background(), e.ddb, table.CoordinationTableName(e.table), tenant, branch)
	require.NoError(t, err)
	return a
}

// newRecords returns the env's stream records after the first n.
func newRecords(t *testing.T, e *env, n int) []processor.Record {
	t.Helper()
	_, all := e.records(t)
	return all[n:]
}

// partitionRecords returns the env's stream records of transaction partitions
// after the first n of them.
func partitionRecords(t *testing.T, e *env, n int) []processor.Record {
	t.Helper()
	_, all := e.records(t)
	var out []processor.Record
	for _, r := range all {
		if pk, _ := table.String(r.Keys, table.AttrPK); aggregates.IsTransactionKey(pk) {
			out = append(out, r)
		}
	}
	return out[n:]
}

// A run whose records net to zero on every report (an edit and its
// revert) changes no report, and moves applied by its two records: the
// commit the repair's sequence 1 lacked a trace of (issue 25, finding 1).
func TestCountedChanges_ANettingRunMovesAppliedByItsRecords(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	p := e.processor(t, nil, nil)
	putCounted(t, e, "a", "10", 1)
	recs := partitionRecords(t, e, 0)
	_, err := p.Process(ctx, p.MarkerGuard(), recs)
	require.NoError(t, err)
	require.Equal(t, table.Applied{Exists: true, Applied: 1}, appliedOf(t, e, "t", "x"))
	month := reportKey("x", aggregates.Monthly, "2024-04")
	before := getReport(t, e, month)

	putCounted(t, e, "a", "20", 2)
	putCounted(t, e, "a", "10", 3)
	netting := partitionRecords(t, e, len(recs))
	require.Len(t, netting, 2, "the edit and its revert")
	res, err := p.Process(ctx, p.MarkerGuard(), netting)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Runs, "one run, claimed although it nets to zero")
	assert.Equal(t, table.Applied{Exists: true, Applied: 3}, appliedOf(t, e, "t", "x"))
	assert.Equal(t, before, getReport(t, e, month), "the report is untouched")

	// Delivered again, alone or after the records before it: nothing moves.
	for _, again := range [][]processor.Record{netting, append(recs, netting...)} {
		_, err := p.Process(ctx, p.MarkerGuard(), again)
		require.NoError(t, err)
	}
	assert.Equal(t, table.Applied{Exists: true, Applied: 3}, appliedOf(t, e, "t", "x"))
	e.requireReconciled(t)
}

// getReport reads a report item's figures as stored (nil when absent).
func getReport(t *testing.T, e *env, k aggregates.ReportKey) map[string]ddbtypes.AttributeValue {
	t.Helper()
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &e.table, Key: table.Key(k.Key()), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	return out.Item
}

// A direct PutItem without changes (another path than the writer) is
// counted in foreign, once, and in ledger_foreign_records_total, also
// when the run's answer is lost and its retry finds the claim taken; a
// hard DeleteItem of it is foreign too. The applied count does not move.
func TestCountedChanges_AForeignWriteMovesForeignAndTheMetric(t *testing.T) {
	ctx := context.Background()
	for _, lose := range []bool{false, true} {
		t.Run(fmt.Sprintf("answer lost=%v", lose), func(t *testing.T) {
			e := newEnv(t)
			putCounted(t, e, "a", "10", 1)
			putTxn(t, e, "x", "2024-04-01", "b", "5", "rent", "") // no changes, no sig
			recs := newRecords(t, e, 0)
			p := e.processor(t, nil, e.faulty)
			var once sync.Once
			e.faults.Decide = func(op string) ledgertest.Fault {
				f := ledgertest.Pass
				if lose && op == "TransactWriteItems" {
					once.Do(func() { f = ledgertest.LoseAnswer })
				}
				return f
			}
			_, err := p.Process(ctx, p.MarkerGuard(), recs)
			require.NoError(t, err)
			assert.Equal(t, table.Applied{Exists: true, Applied: 1, Foreign: 1}, appliedOf(t, e, "t", "x"))
			assert.Equal(t, 1.0, testutil.ToFloat64(p.Metrics().ForeignRecords))
			if lose {
				assert.Equal(t, 1.0, testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues(processor.ConflictDuplicate)),
					"the retry found its own claim landed")
			}

			// A duplicate invocation counts nothing more.
			p2 := e.processor(t, nil, nil)
			_, err = p2.Process(ctx, p2.MarkerGuard(), recs)
			require.NoError(t, err)
			assert.Zero(t, testutil.ToFloat64(p2.Metrics().ForeignRecords), "another consumer's duplicate is not its foreign record")

			_, err = e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.table,
				Key: table.Key(aggregates.Key{PK: aggregates.TransactionPK("t", "x"), SK: "2024-04-01#b"})})
			require.NoError(t, err)
			_, err = p.Process(ctx, p.MarkerGuard(), newRecords(t, e, 0))
			require.NoError(t, err)
			assert.Equal(t, table.Applied{Exists: true, Applied: 1, Foreign: 2}, appliedOf(t, e, "t", "x"))
			assert.Equal(t, 2.0, testutil.ToFloat64(p.Metrics().ForeignRecords))
			e.requireReconciled(t)
		})
	}
}

// An applied item whose count is not a number (damaged by another path:
// the item is ledger's own) fails the run's commit by name; nothing of
// the run lands, and it commits once the item is mended.
func TestCountedChanges_ADamagedAppliedItemFailsTheCommitByName(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	coord := table.CoordinationTableName(e.table)
	_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &coord, Item: map[string]ddbtypes.AttributeValue{
		"PK": sAV(aggregates.AppliedKey("t", "x").PK), "SK": sAV(aggregates.AppliedKey("t", "x").SK), "applied": sAV("lots"),
	}})
	require.NoError(t, err)
	putCounted(t, e, "a", "10", 1)
	recs := newRecords(t, e, 0)
	p := e.processor(t, nil, nil)
	_, err = p.Process(ctx, p.MarkerGuard(), recs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "applied")
	assert.Nil(t, getReport(t, e, reportKey("x", aggregates.Monthly, "2024-04")), "nothing of the run landed")

	_, err = e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &coord, Key: table.Key(aggregates.AppliedKey("t", "x"))})
	require.NoError(t, err)
	_, err = p.Process(ctx, p.MarkerGuard(), recs)
	require.NoError(t, err)
	assert.Equal(t, table.Applied{Exists: true, Applied: 1}, appliedOf(t, e, "t", "x"))
	e.requireReconciled(t)
}

// capacity records the write units DynamoDB reports per table for every
// TransactWriteItems that lands.
type capacity struct {
	processor.DynamoDB
	mu    sync.Mutex
	units map[string]float64
	calls int
	// actions counts the landed actions on each table.
	actions map[string]int
}

func (c *capacity) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	in.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityIndexes
	out, err := c.DynamoDB.TransactWriteItems(ctx, in, opts...)
	if err == nil {
		c.mu.Lock()
		c.calls++
		for _, it := range in.TransactItems {
			switch {
			case it.Update != nil:
				c.actions[aws.ToString(it.Update.TableName)]++
			case it.Put != nil:
				c.actions[aws.ToString(it.Put.TableName)]++
			case it.Delete != nil:
				c.actions[aws.ToString(it.Delete.TableName)]++
			case it.ConditionCheck != nil:
				c.actions[aws.ToString(it.ConditionCheck.TableName)]++
			}
		}
		for _, cc := range out.ConsumedCapacity {
			c.units[aws.ToString(cc.TableName)] += aws.ToFloat64(cc.CapacityUnits)
		}
		c.mu.Unlock()
	}
	return out, err
}

// The cost: what the applied items add to the runs' transactions, as
// DynamoDB Local reports it per table (the coordination table holds
// nothing else a standard-mode run writes), over the runs of a workload
// of 600 counted writes in batches of 1 to 100 records.
func TestCountedChanges_WriteUnitsOfTheAppliedUpdates(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	w := ledgertest.NewWorkload(5)
	w.Counted = true
	require.NoError(t, w.Run(ctx, e.ddb, e.table, 600))
	_, recs := e.records(t)
	c := &capacity{DynamoDB: e.ddb, units: map[string]float64{}, actions: map[string]int{}}
	p := e.processor(t, nil, c)
	var runs, applied int
	for i, n := 0, 1; i < len(recs); i, n = i+n, min(2*n, 100) {
		res, err := p.Process(ctx, p.MarkerGuard(), recs[i:min(i+n, len(recs))])
		require.NoError(t, err)
		runs += res.Runs
	}
	for _, tenant := range w.Tenants {
		for _, branch := range w.Branches {
			a := appliedOf(t, e, tenant, branch)
			applied += int(a.Applied + a.Foreign)
		}
	}
	coordName := table.CoordinationTableName(e.table)
	updates, others := c.actions[coordName], c.actions[e.table]
	item, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &coordName, Key: table.Key(aggregates.AppliedKey(w.Tenants[0], w.Branches[0])), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	size := 0
	for name, v := range item.Item {
		size += len(name)
		switch v := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			size += len(v.Value)
		case *ddbtypes.AttributeValueMemberN:
			size += len(v.Value)
		default:
			t.Fatalf("applied item attribute %s: %T", name, v)
		}
	}
	// AWS bills each action of a transaction 2 WRU per started KB: an
	// applied update (an item of about size bytes) 2, every other action
	// at least 2 (a report head of 1–6 KB, 2–12).
	t.Logf("%d records of transaction partitions in %d runs (%d transactions): %d applied-item updates (%.2f per run: +%.1f WRU per run on AWS), %d other actions (%.2f per run: at least %.1f WRU), +%.1f%% at most; DynamoDB Local reports %.0f units on the coordination table (%.2f per transaction, whatever its updates), %.0f on the ledger table; applied item ~%d bytes",
		applied, runs, c.calls, updates, float64(updates)/float64(runs), 2*float64(updates)/float64(runs), others, float64(others)/float64(runs),
		2*float64(others)/float64(runs), 100*float64(updates)/float64(others), c.units[coordName], c.units[coordName]/float64(c.calls), c.units[e.table], size)
	assert.Less(t, size, 1024, "one started KB")
	assert.Equal(t, runs, c.calls)
	assert.Positive(t, updates)
	e.requireReconciled(t)
}

// After a randomized workload (writes the writer could make, counted, and
// another path's: edits that keep the count, items without a count, hard
// deletes) delivered through the standard-mode path with lost answers,
// dropped requests, crashes, duplicate invocations, rewinds and short
// redeliveries (deliverMarker), every branch's applied + probed + foreign
// is the number of records of its transaction partition in the stream,
// and applied is the writer-shaped ones the workload wrote (its own
// bookkeeping: the oracle reads neither the applied items' code nor the
// classification).
func TestCountedChanges_RandomizedStandardModeCountsEveryRecordOnce(t *testing.T) {
	for _, seed := range modeSeeds(t, "marker") {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			rng := rand.New(rand.NewPCG(seed, 7))
			ch := &chaos{rng: rand.New(rand.NewPCG(seed, 11)), lose: 0.08, drop: 0.04, injected: map[string]int{}}
			e.faults.Decide = ch.decide
			w := ledgertest.NewWorkload(seed)
			w.Counted, w.Tombstones = true, true
			var all []processor.Record
			stats := map[string]int{}
			for phase := 0; phase < 2; phase++ {
				require.NoError(t, w.Run(ctx, e.ddb, e.table, 500))
				_, recs := e.records(t)
				from := len(all)
				all = recs
				deliverMarker(t, e, rng, ch, all, from, stats)
			}
			e.faults.Decide = nil

			records := map[string]int64{} // the oracle: records of each branch's transaction partition in the stream
			for _, r := range all {
				pk, _ := table.String(r.Keys, table.AttrPK)
				if tenant, branch, ok := aggregates.ParseTransactionPK(pk); ok {
					records[tenant+"/"+branch]++
				}
			}
			var sumRecords, sumForeign int64
			for _, tenant := range w.Tenants {
				for _, branch := range w.Branches {
					b := tenant + "/" + branch
					a := appliedOf(t, e, tenant, branch)
					assert.Equal(t, records[b], a.Applied+a.Probed+a.Foreign+a.Compacted, "%s: every record counted once", b)
					assert.Equal(t, int64(w.WriterShaped[b]), a.Applied, "%s: the writer-shaped ones in applied", b)
					assert.Zero(t, a.Probed, "%s: no probe was written", b)
					sumRecords += records[b]
					sumForeign += a.Foreign
				}
			}
			assert.Positive(t, sumForeign, "the workload wrote foreign records")
			e.requireReconciled(t)
			t.Logf("seed %d: %d records of transaction partitions, %d foreign; workload %v; delivery %v; faults %v",
				seed, sumRecords, sumForeign, w.Counts, stats, ch.injected)
		})
	}
}

// Records of a transaction partition that change no report — a delete
// into a tombstone of an item already absent from the reports, a
// compaction's mark of the tombstone and its REMOVE — are claimed by
// runs of their own and counted (the marker walk used to step over such
// records as without effect), each once, whatever batch they come in.
func TestCountedChanges_RecordsWithoutEffectOnTheReportsAreClaimedAndCounted(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	coord := table.CoordinationTableName(e.table)
	p := e.processor(t, nil, nil)
	deliver := func() {
		t.Helper()
		for _, r := range partitionRecords(t, e, 0) {
			_, err := p.Process(ctx, p.MarkerGuard(), []processor.Record{r})
			require.NoError(t, err)
		}
	}
	putCounted(t, e, "a", "10", 1)
	k := aggregates.Key{PK: aggregates.TransactionPK("t", "x"), SK: "2024-04-01#a"}
	got, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &e.table, Key: table.Key(k), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	tomb := got.Item
	for _, name := range table.TombstoneRemoves {
		delete(tomb, name)
	}
	tomb[table.AttrDeletedAt] = sAV("2024-04-02T00:00:00Z")
	table.Count(tomb, 2)
	_, err = e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: tomb})
	require.NoError(t, err)
	deliver()
	require.Equal(t, table.Applied{Exists: true, Applied: 2}, appliedOf(t, e, "t", "x"))

	mark, err := table.MarkTombstone(e.table, coord, tomb, "compact-1")
	require.NoError(t, err)
	_, err = e.ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: mark})
	require.NoError(t, err)
	retire, err := table.RetireTombstone(e.table, coord, k, "compact-1", 3)
	require.NoError(t, err)
	_, err = e.ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: retire})
	require.NoError(t, err)
	recs := partitionRecords(t, e, 2)
	require.Len(t, recs, 2, "the mark (a MODIFY of a tombstone) and the REMOVE")
	for _, batch := range [][]processor.Record{recs[:1], recs, recs[1:], recs} {
		res, err := p.Process(ctx, p.MarkerGuard(), batch)
		require.NoError(t, err)
		assert.Zero(t, res.Ignored)
	}
	assert.Equal(t, table.Applied{Exists: true, Applied: 3, Compacted: 1, Retired: 3}, appliedOf(t, e, "t", "x"),
		"the create, the tombstone and the mark in applied, the compaction's REMOVE apart, once each; retired as the compaction left it")
	assert.Zero(t, testutil.ToFloat64(p.Metrics().ForeignRecords))
	e.requireReconciled(t)
}

// conflictOnApplied cancels the first TransactWriteItems that updates an
// applied item with a TransactionConflict on that item (as AWS answers a
// transaction meeting another on one of its items), without sending it.
type conflictOnApplied struct {
	processor.DynamoDB
	coord string
	done  bool
}

func (c *conflictOnApplied) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if !c.done {
		for i, it := range in.TransactItems {
			if it.Update != nil && aws.ToString(it.Update.TableName) == c.coord {
				c.done = true
				reasons := make([]ddbtypes.CancellationReason, len(in.TransactItems))
				for j := range reasons {
					reasons[j].Code = aws.String("None")
				}
				reasons[i].Code = aws.String("TransactionConflict")
				return nil, &ddbtypes.TransactionCanceledException{Message: aws.String("conflict"), CancellationReasons: reasons}
			}
		}
	}
	return c.DynamoDB.TransactWriteItems(ctx, in, opts...)
}

// A TransactionConflict on a branch's applied item (another run of the
// branch, a compaction's retirement) cancels the run's transaction; it is
// retried, counted as reason applied, and the records counted once.
func TestCountedChanges_AConflictOnTheAppliedItemIsRetriedAndCountedOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	putCounted(t, e, "a", "10", 1)
	api := &conflictOnApplied{DynamoDB: e.ddb, coord: table.CoordinationTableName(e.table)}
	p := e.processor(t, nil, api)
	_, err := p.Process(ctx, p.MarkerGuard(), partitionRecords(t, e, 0))
	require.NoError(t, err)
	require.True(t, api.done)
	assert.Equal(t, table.Applied{Exists: true, Applied: 1}, appliedOf(t, e, "t", "x"))
	m := p.Metrics()
	assert.Equal(t, 1.0, testutil.ToFloat64(m.Conflicts.WithLabelValues(processor.ConflictApplied)))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.Conflicts.WithLabelValues(processor.ConflictTransactionConflict)))
	e.requireReconciled(t)
}

// The batch consumers (plan layout 6: pollers, the tumbling window) count
// foreign records as the standard-mode runs do: in the branch's applied
// item, once, and in ledger_foreign_records_total.
func TestCountedChanges_ABatchCountsAForeignWrite(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	putCounted(t, e, "a", "10", 1)
	putTxn(t, e, "x", "2024-04-01", "b", "5", "rent", "") // no changes, no sig
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	g := p.ShardGuard(e.streamARN, shard)
	g.CommitBatches()
	_, err := p.Process(ctx, g, recs)
	require.NoError(t, err)
	assert.Equal(t, table.Applied{Exists: true, Applied: 1, Foreign: 1}, appliedOf(t, e, "t", "x"))
	assert.Equal(t, 1.0, testutil.ToFloat64(p.Metrics().ForeignRecords))
	e.requireReconciled(t)
}
