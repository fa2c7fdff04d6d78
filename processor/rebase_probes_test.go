package processor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// This file pins the consumers' side of the rebase (docs/exactly-once.md,
// "B as built (session 26)"): every probe is counted in probed and, when
// its id is a rebase id, in probedBy#<id>, in the same action on the
// applied item, so that a rebase can wait on its own probes.

// probeKey probes the item at k as the rebase's B2 does (table.Probe),
// reading it consistently first.
func probeKey(t *testing.T, e *env, k aggregates.Key, id string) {
	t.Helper()
	ctx := context.Background()
	out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &e.table, Key: table.Key(k), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	require.NotNil(t, out.Item, "%s", k)
	_, err = e.ddb.UpdateItem(ctx, table.Probe(e.table, out.Item, id))
	require.NoError(t, err)
}

// Probes of two rebases, one key probed twice, and a probe whose id is no
// rebase id: each consumer kind counts every probe in probed, and the
// well-formed ones in their own id's count.
func TestRebaseProbes_CountedPerRebaseIDInEachConsumerKind(t *testing.T) {
	for _, mode := range []string{"marker", "batch"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			a := rtx{"acme", "sp", "BRL", "2026-11-27", "a", "INCOME", "10", "food"}
			b := rtx{"acme", "sp", "BRL", "2026-11-27", "b", "EXPENSE", "4", "rent"}
			ka, kb := a.put(t, e, ""), b.put(t, e, "")
			c := newConsumer(t, e, mode, nil, processor.Config{})
			c.pass()
			before := appliedOf(t, e, "acme", "sp")
			require.Equal(t, int64(2), before.Applied+before.Foreign)

			probeKey(t, e, ka, "rb-one")
			probeKey(t, e, kb, "rb-two")
			probeKey(t, e, ka, "rb-one")
			probeKey(t, e, kb, "not-a-rebase-id")
			c.pass()
			after := appliedOf(t, e, "acme", "sp")
			assert.Equal(t, int64(4), after.Probed, "every probe in probed")
			assert.Equal(t, map[string]int64{"rb-one": 2, "rb-two": 1}, after.ProbedBy, "the well-formed ones per id")
			assert.Equal(t, before.Applied, after.Applied)
			assert.Equal(t, before.Foreign, after.Foreign)

			c.pass() // delivered again: nothing moves
			assert.Equal(t, after, appliedOf(t, e, "acme", "sp"))
			requireEveryRecordCounted(t, e)
			e.requireReconciled(t)
		})
	}
}

// A layout-6 batch holding probes dies between groups; the resumer, with
// other limits, plans the same groups and counts each probe once under
// its id.
func TestRebaseProbes_AResumerCountsTheBatchsProbesPerID(t *testing.T) {
	e := newEnv(t)
	batch6Txs(t, e, 120)
	keys := map[string]aggregates.Key{}
	for _, item := range scanAll(t, e) {
		pk, _ := table.String(item, table.AttrPK)
		if tenant, branch, ok := aggregates.ParseTransactionPK(pk); ok && tenant == "acme" && branch == "b0" {
			keys[table.KeyOf(item).SK] = table.KeyOf(item)
		}
	}
	require.NotEmpty(t, keys)
	probes := int64(0)
	for _, k := range keys {
		probeKey(t, e, k, "rb-resumed")
		probes++
	}
	recs, _ := crashMidBatch6(t, e, false)
	c := newConsumer(t, e, "batch", nil, processor.Config{})
	c.deliver(recs...)
	c.drain()
	a := appliedOf(t, e, "acme", "b0")
	assert.Equal(t, probes, a.Probed)
	assert.Equal(t, map[string]int64{"rb-resumed": probes}, a.ProbedBy)
	requireEveryRecordCounted(t, e)
	e.requireReconciled(t)
}

// A batch dies half-committed, leaving an open mark on a branch: a rebase
// of the branch is refused while the batch is pending (its own pin
// cleared); once the batch is abandoned (its later records lost), the
// rebase, with a batch consumer committing meanwhile, removes the stale
// mark, heals the branch's reports and counts its records again.
func TestRebase_AnAbandonedBatchsOpenMarkIsRemovedAndItsLossHealed(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	batch6Txs(t, e, 120)
	crashMidBatch6(t, e, false)
	tenant, branch := openMarkBranch(t, e)
	opts := processor.RebaseOptions{Tenant: tenant, Branch: branch, StreamARN: e.streamARN, Wait: time.Minute, Poll: 20 * time.Millisecond}
	_, err := processor.Rebase(ctx, e.ddb, e.table, opts)
	require.ErrorContains(t, err, "half-committed")
	a := appliedOf(t, e, tenant, branch)
	assert.Empty(t, a.Rebasing, "a refused rebase clears its own pin")
	assert.NotEmpty(t, a.Open)

	shard := shardOf(t, e)
	key := aggregates.CheckpointKey(e.streamARN, shard)
	coord := table.CoordinationTableName(e.table)
	out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &coord, Key: table.Key(key), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	cp, err := table.DecodeCheckpoint(shard, out.Item)
	require.NoError(t, err)
	p, err := processor.New(e.ddb, processor.Config{Table: e.table}, nil)
	require.NoError(t, err)
	landed, err := p.AbandonCheckpoint(ctx, key, table.Abandon{Shard: shard, Prev: cp.Seq, Pending: cp.Pending, Now: time.Now().UTC()})
	require.NoError(t, err)
	require.True(t, landed)
	diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{Tenant: tenant, Branch: branch})
	require.NoError(t, err)
	require.NotEmpty(t, diffs, "the batch's records after its landed groups are lost to the reports")

	c := newConsumer(t, e, "batch", nil, processor.Config{})
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				c.pass()
			}
		}
	}()
	res, err := processor.Rebase(ctx, e.ddb, e.table, opts)
	close(stop)
	<-done
	require.NoError(t, err)
	assert.Len(t, res.StaleOpen, len(a.Open), "every mark was stale")
	c.pass()
	diffs, _, err = processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{Tenant: tenant, Branch: branch})
	require.NoError(t, err)
	assert.Empty(t, diffs)
	after := appliedOf(t, e, tenant, branch)
	assert.Empty(t, after.Open)
	assert.Empty(t, after.Rebasing)
	assert.NotEmpty(t, after.FencedAt)
	var sum int64
	for _, item := range scanAll(t, e) {
		if pk, _ := table.String(item, table.AttrPK); pk == aggregates.TransactionPK(tenant, branch) {
			n, _ := table.Changes(item)
			sum += n
		}
	}
	assert.Equal(t, sum+after.Retired, after.Applied+after.Probed, "applied + probed = Σ changes + retired")
}

// An abandoned rebase still running probes a key after this rebase's probe
// of it, and a consumer commits that probe before B5: it is in neither
// this rebase's sum nor what is counted after B5, so the round starts
// again (B3: probed moved by more than this rebase's probes), and the next
// one lands with every record counted.
func TestRebase_AnotherRebasesProbeCommittedMeanwhileStartsTheRoundAgain(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	a := rtx{"acme", "sp", "BRL", "2026-11-27", "a", "INCOME", "10", "food"}
	ka := a.put(t, e, "")
	rtx{"acme", "sp", "BRL", "2026-11-27", "b", "EXPENSE", "4", "rent"}.put(t, e, "")
	c := newConsumer(t, e, "batch", nil, processor.Config{})
	c.pass()
	stop, done := c.passEvery(20 * time.Millisecond)
	var once sync.Once
	var steps []string
	res, err := processor.Rebase(ctx, e.ddb, e.table, processor.RebaseOptions{Tenant: "acme", Branch: "sp", Wait: time.Minute, Poll: 20 * time.Millisecond,
		Log: func(format string, args ...any) {
			steps = append(steps, fmt.Sprintf(format, args...))
			if strings.HasPrefix(format, "B2:") {
				once.Do(func() {
					before := appliedOf(t, e, "acme", "sp").ProbedBy["rb-old"]
					probeKey(t, e, ka, "rb-old")
					require.Eventually(t, func() bool { return appliedOf(t, e, "acme", "sp").ProbedBy["rb-old"] > before }, time.Minute, 20*time.Millisecond)
				})
			}
		}})
	close(stop)
	<-done
	require.NoError(t, err, "steps: %v", steps)
	assert.Equal(t, 2, res.Rounds, "steps: %v", steps)
	assert.Contains(t, strings.Join(steps, "\n"), "probes of another rebase")
	c.pass()
	after := appliedOf(t, e, "acme", "sp")
	sum := changesOf(t, e, "acme", "sp")
	assert.Equal(t, sum, after.Applied+after.Probed, "applied + probed = Σ changes")
	e.requireReconciled(t)
}

// Every other UpdateItem's answer is lost (the pin's, the probes') and so
// is B5's transaction's: each
// probe is recognised as landed on the re-read (never counted twice, never
// written twice), the last transaction as landed by the epoch, and the
// rebase ends with every record counted.
func TestRebase_LostAnswersOfProbesAndOfB5LandOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for _, id := range []string{"a", "b", "c"} {
		rtx{"acme", "sp", "BRL", "2026-11-27", id, "INCOME", "10", "food"}.put(t, e, "")
	}
	c := newConsumer(t, e, "batch", nil, processor.Config{})
	c.pass()
	stop, done := c.passEvery(20 * time.Millisecond)
	var updates, txs atomic.Int64
	e.faults.Decide = func(op string) ledgertest.Fault {
		switch {
		case op == "UpdateItem" && updates.Add(1)%2 == 1, op == "TransactWriteItems" && txs.Add(1) == 1:
			return ledgertest.LoseAnswer // it lands; the answer is lost
		}
		return ledgertest.Pass
	}
	res, err := processor.Rebase(ctx, e.faulty, e.table, processor.RebaseOptions{Tenant: "acme", Branch: "sp", Wait: time.Minute, Poll: 20 * time.Millisecond})
	e.faults.Decide = nil
	close(stop)
	<-done
	require.NoError(t, err)
	assert.Equal(t, int64(3), res.Probes, "each probe once")
	c.pass()
	after := appliedOf(t, e, "acme", "sp")
	assert.Empty(t, after.Rebasing)
	assert.Equal(t, int64(1), after.Epoch)
	var sum int64
	for _, item := range scanAll(t, e) {
		if pk, _ := table.String(item, table.AttrPK); pk == aggregates.TransactionPK("acme", "sp") {
			n, _ := table.Changes(item)
			assert.Equal(t, int64(1), n, "probed once: %v", table.KeyOf(item))
			sum += n
		}
	}
	assert.Equal(t, sum, after.Applied+after.Probed)
	e.requireReconciled(t)
}

// passEvery runs c.pass every d in a goroutine until stop is closed;
// done is closed when it has returned.
func (c *consumer) passEvery(d time.Duration) (stop, done chan struct{}) {
	stop, done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(d):
				c.pass()
			}
		}
	}()
	return stop, done
}

// changesOf is Σ changes over the transaction items of tenant/branch in
// the env's table (tombstones included).
func changesOf(t *testing.T, e *env, tenant, branch string) int64 {
	t.Helper()
	var sum int64
	for _, item := range scanAll(t, e) {
		if pk, _ := table.String(item, table.AttrPK); pk == aggregates.TransactionPK(tenant, branch) {
			n, _ := table.Changes(item)
			sum += n
		}
	}
	return sum
}

// openMarkBranch is the branch whose applied item holds an open mark (a
// batch that died half-committed, crashMidBatch6).
func openMarkBranch(t *testing.T, e *env) (tenant, branch string) {
	t.Helper()
	for _, item := range coordItems(t, e, "APPLIED#") {
		if _, ok := item[table.AttrOpen]; ok {
			pk, _ := table.String(item, table.AttrPK)
			parts := strings.Split(pk, "#")
			return parts[1], parts[2]
		}
	}
	t.Fatal("no branch with an open mark")
	return "", ""
}
