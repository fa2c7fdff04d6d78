package processor_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
)

// settledOnly keeps the differences of branches with nothing in flight, as
// ledgerctl reconcile --repair does.
func settledOnly(diffs []processor.Difference, fl processor.InFlightResult) []processor.Difference {
	var out []processor.Difference
	for _, d := range diffs {
		if fl.Settled(processor.Scope{Tenant: d.Report.Tenant, Branch: d.Report.Branch}) {
			out = append(out, d)
		}
	}
	return out
}

// TestRepair_NeverFoldsARecordInFlightTwice: a report is damaged while a
// transaction of its branch is written but not yet committed by the
// consumer (a stuck shard, a tumbling window not yet final, a dead
// poller's batch). Repairing it then would fold that transaction from the
// table and again when the consumer commits it: the test shows that
// happening, and that InFlight names the branch so the repair leaves it
// alone; a consumer commit between a repair's read and its write makes the
// write fail instead. Once the record is committed, the repair is exact.
func TestRepair_NeverFoldsARecordInFlightTwice(t *testing.T) {
	ctx := context.Background()
	for _, guard := range []string{"checkpoint", "markers"} {
		t.Run(guard, func(t *testing.T) {
			e := newEnv(t)
			putTxn(t, e, "busy", "2024-04-01", "a", "10", "rent", "")
			putTxn(t, e, "calm", "2024-04-01", "b", "10", "rent", "")
			shard, recs := e.records(t)
			p := e.processor(t, nil, nil)
			var g processor.Guard = p.ShardGuard(e.streamARN, shard)
			if guard == "markers" {
				g = p.MarkerGuard()
			}
			_, err := p.Process(ctx, g, recs)
			require.NoError(t, err)
			e.requireReconciled(t)

			damage := func(branch string) {
				k := reportKey(branch, aggregates.Monthly, "2024-04").Key()
				_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table,
					Key:                       map[string]ddbtypes.AttributeValue{"PK": sAV(k.PK), "SK": sAV(k.SK)},
					UpdateExpression:          aws.String("SET totalIncome = totalIncome + :d"),
					ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":d": nAV("0.5")}})
				require.NoError(t, err)
			}
			damage("busy")
			damage("calm")
			putTxn(t, e, "busy", "2024-04-02", "c", "7", "rent", "") // in flight: written, not committed
			_, all := e.records(t)
			pending := all[len(recs):]

			diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{})
			require.NoError(t, err)
			fl, err := p.InFlight(ctx, e.streams, e.streamARN, 0)
			require.NoError(t, err)
			assert.Equal(t, 1, fl.Branches[processor.Scope{Tenant: "t", Branch: "busy"}], "the busy branch has one record in flight")
			assert.True(t, fl.Settled(processor.Scope{Tenant: "t", Branch: "calm"}))

			// The calm branch is repaired; the busy one is left alone.
			res, err := processor.Repair(ctx, e.ddb, e.table, settledOnly(diffs, fl), time.Now())
			require.NoError(t, err)
			assert.Equal(t, 1, res.Repaired)
			// A consumer commits between a repair's read and its write: the
			// write is refused, not folded over the commit.
			_, err = p.Process(ctx, g, pending)
			require.NoError(t, err)
			fl, err = p.InFlight(ctx, e.streams, e.streamARN, 0)
			require.NoError(t, err)
			assert.Zero(t, fl.Branches[processor.Scope{Tenant: "t", Branch: "busy"}], "committed: nothing in flight")
			res, err = processor.Repair(ctx, e.ddb, e.table, diffs, time.Now())
			require.NoError(t, err)
			assert.Zero(t, res.Repaired, "the busy branch's reports changed since the read")

			// Settled now: one more reconcile and repair are exact.
			diffs, _, err = processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{})
			require.NoError(t, err)
			require.NotEmpty(t, diffs)
			res, err = processor.Repair(ctx, e.ddb, e.table, settledOnly(diffs, fl), time.Now())
			require.NoError(t, err)
			assert.Equal(t, len(diffs), res.Repaired)
			e.requireReconciled(t)

			// What the in-flight check prevents: repair with a record in
			// flight, then the consumer commits it, and it counts twice.
			damage("busy")
			putTxn(t, e, "busy", "2024-04-03", "d", "3", "rent", "")
			_, all2 := e.records(t)
			diffs, _, err = processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{})
			require.NoError(t, err)
			fl, err = p.InFlight(ctx, e.streams, e.streamARN, 0)
			require.NoError(t, err)
			assert.Empty(t, settledOnly(diffs, fl), "in flight: nothing may be repaired")
			_, err = processor.Repair(ctx, e.ddb, e.table, diffs, time.Now()) // ignoring the check
			require.NoError(t, err)
			_, err = p.Process(ctx, g, all2[len(all):])
			require.NoError(t, err)
			diffs, _, err = processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{})
			require.NoError(t, err)
			require.NotEmpty(t, diffs, "a repair over a record in flight counts it twice")
			assert.Contains(t, diffs[0].String(), "count=")
		})
	}
}

// TestInFlight_AHalfCommittedBatchIsInFlight: a poller died between the
// group transactions of a batch; its records are in flight (some of their
// reports have the batch's delta, others not) until a consumer finishes the
// batch.
func TestInFlight_AHalfCommittedBatchIsInFlight(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(23).Run(ctx, e.ddb, e.table, 150))
	shard, recs := e.records(t)
	start := halfCommitted(t, e, recs, shard, 120)
	p := e.processor(t, nil, nil)
	fl, err := p.InFlight(ctx, e.streams, e.streamARN, 0)
	require.NoError(t, err)
	assert.NotEmpty(t, fl.Branches, "the half-committed batch's branches are in flight")
	fl, err = p.InFlight(ctx, e.streams, e.streamARN, 5)
	require.NoError(t, err)
	assert.True(t, fl.Truncated, "past --max-records nothing counts as settled")
	assert.False(t, fl.Settled(processor.Scope{Tenant: "nobody", Branch: "x"}))

	g := p.ShardGuard(e.streamARN, shard)
	g.CommitBatches()
	g.SetOrigin(recs[start-1].SequenceNumber)
	_, err = p.Process(ctx, g, recs[start:])
	require.NoError(t, err)
	fl, err = p.InFlight(ctx, e.streams, e.streamARN, 0)
	require.NoError(t, err)
	assert.Empty(t, fl.Branches, "finished: nothing in flight")
	e.requireReconciled(t)
}

// queryHook runs hook once, right after the first Query of partition pk.
type queryHook struct {
	processor.ReconcileAPI
	pk   string
	hook func()
}

func (h *queryHook) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := h.ReconcileAPI.Query(ctx, in, opts...)
	if v, ok := in.ExpressionAttributeValues[":pk"].(*ddbtypes.AttributeValueMemberS); ok && v.Value == h.pk && h.hook != nil {
		f := h.hook
		h.hook = nil
		f()
	}
	return out, err
}

// laggingStream hides the records after seq: their stream records are not
// readable yet (a propagation lag far below --settle).
type laggingStream struct {
	*dynamodbstreams.Client
	hideAfter string
}

func (l *laggingStream) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	out, err := l.Client.GetRecords(ctx, in, opts...)
	if err == nil {
		var keep = out.Records[:0]
		for _, r := range out.Records {
			if processor.CompareSequence(aws.ToString(r.Dynamodb.SequenceNumber), l.hideAfter) <= 0 {
				keep = append(keep, r)
			}
		}
		out.Records = keep
	}
	return out, err
}

// A read is an interval, not an instant (found by review): were the
// transactions read before the reports, a write committed between the two
// queries of read 1 and an opposite write after read 1, whose record is not
// readable yet when InFlight looks (well within --settle), would pass
// Settled and InFlight, and the repair would fold the second write twice.
// Reconcile reads a branch's reports before its transactions, so the
// commit shows as a change of the stored figures and nothing is repaired
// over it.
func TestRepair_AReadIsAnIntervalNotAnInstant(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	putTxn(t, e, "b", "2024-04-01", "a", "10", "rent", "")
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	g := p.ShardGuard(e.streamARN, shard)
	_, err := p.Process(ctx, g, recs)
	require.NoError(t, err)
	// damage the monthly report
	mk := reportKey("b", aggregates.Monthly, "2024-04").Key()
	_, err = e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table,
		Key:              map[string]ddbtypes.AttributeValue{"PK": sAV(mk.PK), "SK": sAV(mk.SK)},
		UpdateExpression: aws.String("SET totalIncome = totalIncome + :d"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":d": nAV("0.5")}})
	require.NoError(t, err)

	scope := processor.Scope{Tenant: "t", Branch: "b"}
	n := len(recs)
	// read 1: X inserted and committed after the transactions were read,
	// before the reports are.
	api := &queryHook{ReconcileAPI: e.ddb, pk: aggregates.TransactionPK("t", "b"), hook: func() {
		putTxn(t, e, "b", "2024-04-05", "x", "7", "rent", "")
		_, all := e.records(t)
		_, err := p.Process(ctx, g, all[n:])
		require.NoError(t, err)
		n = len(all)
	}}
	first, _, err := processor.Reconcile(ctx, api, e.table, scope)
	require.NoError(t, err)
	// between the reads (near the end of --settle): X deleted; its record not committed.
	_, err = e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.table,
		Key: map[string]ddbtypes.AttributeValue{"PK": sAV(aggregates.TransactionPK("t", "b")), "SK": sAV("2024-04-05#x")}})
	require.NoError(t, err)
	second, _, err := processor.Reconcile(ctx, e.ddb, e.table, scope)
	require.NoError(t, err)
	settled := processor.Settled(first, second)
	for _, d := range settled {
		t.Logf("settled: %s", d)
	}
	_, all := e.records(t)
	// the delete's record becomes readable a moment after InFlight reads the shard
	fl, err := p.InFlight(ctx, &laggingStream{Client: e.streams, hideAfter: all[n-1].SequenceNumber}, e.streamARN, 0)
	require.NoError(t, err)
	require.True(t, fl.Settled(scope), "nothing readable in flight")
	res, err := processor.Repair(ctx, e.ddb, e.table, settled, time.Now())
	require.NoError(t, err)
	t.Logf("repair: %+v", res)
	_, err = p.Process(ctx, g, all[n:]) // the delete commits
	require.NoError(t, err)
	diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, scope)
	require.NoError(t, err)
	require.Len(t, diffs, 1, "only the damage is left: nothing folded twice")
	assert.Equal(t, mk, diffs[0].Report.Key())
	assert.Equal(t, []string{"totals: got income=10.5 expense=0 count=1; want income=10 expense=0 count=1"}, diffs[0].Lines)
	_, err = processor.Repair(ctx, e.ddb, e.table, diffs, time.Now())
	require.NoError(t, err)
	e.requireReconciled(t)
}
