package processor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// This file pins the adversarial review of step B as built
// (docs/exactly-once.md, "Review (adversarial, session 26): step B as
// built").

// probeHook is the rebase's API with a hook run after the first probe
// (table.Probe: its condition ends in attribute_exists(PK)) lands: the
// hook runs, then the probe's answer is lost.
type probeHook struct {
	processor.RebaseAPI
	once sync.Once
	hook func()
}

var errLostProbe = errors.New("injected: the probe landed and its answer was lost")

func (p *probeHook) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := p.RebaseAPI.UpdateItem(ctx, in, opts...)
	fired := false
	if err == nil && in.ConditionExpression != nil && strings.HasSuffix(*in.ConditionExpression, "attribute_exists(PK)") {
		p.once.Do(func() { fired = true; p.hook() })
	}
	if fired {
		return nil, errLostProbe
	}
	return out, err
}

// S26-B1: a probe lands, its answer is lost, and the writer writes the key
// before the rebase's re-read. The re-read cannot recognise the probe (the
// writer's write removed it), so the key is probed again; the first probe
// is counted by the consumers under the rebase's id but not by the
// rebase. B3's count is then reached by the lost probe while the writer's
// record and the second probe are not committed: B5 lands with the second
// probe's image (the writer's change in it) as the key's base, and the
// writer's record, committed after, adds its change once more.
func TestReviewS26_B1_ALostProbeThenAWriteBeforeTheReReadIsNeverTakenForTheRebasesProbe(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	ka := rtx{"acme", "sp", "BRL", "2026-11-27", "a", "INCOME", "10", "food"}.put(t, e, "")
	c := newConsumer(t, e, "batch", nil, processor.Config{})
	c.pass()
	stop, done := make(chan struct{}), make(chan struct{})
	var startOnce sync.Once
	background := func() { // the consumers run on, from the rebase's second pin
		startOnce.Do(func() {
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
						c.pass()
					}
				}
			}()
		})
	}
	api := &probeHook{RebaseAPI: e.ddb, hook: func() {
		c.pass() // the probe is committed: probedBy#<id> = 1
		out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &e.table, Key: table.Key(ka), ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		item := out.Item
		n, _ := table.Changes(item)
		item["amount"] = &ddbtypes.AttributeValueMemberN{Value: "25"}
		table.Count(item, n+1) // the writer's change of the key
		_, err = e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: item})
		require.NoError(t, err)
	}}
	pins := 0
	res, err := processor.Rebase(ctx, api, e.table, processor.RebaseOptions{Tenant: "acme", Branch: "sp", Wait: time.Minute, Poll: 20 * time.Millisecond,
		Log: func(format string, args ...any) {
			if strings.HasPrefix(format, "B1:") {
				if pins++; pins == 2 {
					background()
				}
			}
		}})
	background()
	close(stop)
	<-done
	require.NoError(t, err)
	t.Logf("rounds %d, probes %d", res.Rounds, res.Probes)
	c.pass()
	after := appliedOf(t, e, "acme", "sp")
	sum := changesOf(t, e, "acme", "sp")
	assert.Equal(t, sum, after.Applied+after.Probed, "applied + probed = Σ changes")
	assert.Empty(t, after.Rebasing)
	assert.Empty(t, after.ProbedBy, "the counts of every probe id used are removed")
	e.requireReconciled(t)
}

// txHook is the rebase's API with a hook run before each
// TransactWriteItems is forwarded.
type txHook struct {
	processor.RebaseAPI
	before func(in *dynamodb.TransactWriteItemsInput)
}

func (h *txHook) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	h.before(in)
	return h.RebaseAPI.TransactWriteItems(ctx, in, opts...)
}

// S26-B2: ledgerctl reconcile --rebase --abandon <id> lands just before the
// rebase's last B5 transaction (the operator took the process for dead).
// The transaction is cancelled (rebasing gone, the epoch moved), and the
// re-read that looks for a lost answer finds epoch = E + 1 and no rebasing:
// what the landed transaction would have left. The rebase said it
// landed (exit 0, "rebased") while nothing of B5 was written.
func TestReviewS26_B2_AnAbandonBeforeTheLastTransactionIsNeverTakenForItsLanding(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	rtx{"acme", "sp", "BRL", "2026-11-27", "a", "INCOME", "10", "food"}.put(t, e, "")
	c := newConsumer(t, e, "batch", nil, processor.Config{})
	c.pass()
	// A report lost: B5 has something to write.
	_, err := e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.table,
		Key: table.Key(aggregates.Key{PK: aggregates.ReportPK("acme", "sp"), SK: "DAILY#2026-11-27"})})
	require.NoError(t, err)
	stop, done := c.passEvery(20 * time.Millisecond)
	const id = "rb-s26-b2"
	var once sync.Once
	api := &txHook{RebaseAPI: e.ddb, before: func(*dynamodb.TransactWriteItemsInput) {
		once.Do(func() {
			_, err := e.ddb.UpdateItem(ctx, table.AbandonRebase(table.CoordinationTableName(e.table), "acme", "sp", id))
			require.NoError(t, err)
		})
	}}
	_, err = processor.Rebase(ctx, api, e.table, processor.RebaseOptions{ID: id, Tenant: "acme", Branch: "sp", Wait: time.Minute, Poll: 20 * time.Millisecond})
	close(stop)
	<-done
	require.Error(t, err, "the rebase was abandoned before its last transaction: it did not land")
	diffs, _, rerr := reconcileBranch(ctx, e, "acme", "sp")
	require.NoError(t, rerr)
	assert.NotEmpty(t, diffs, "the damaged report is still damaged: nothing of B5 landed")
}

// S26-B3: --abandon <id> lands while the rebase still runs, during a round
// that then fails its pin. The next round pinned again
// (attribute_not_exists(rebasing) holds after the abandon) and could
// land: the abandon, documented to stop a rebase of that id still
// running, did not.
func TestReviewS26_B3_AnAbandonedRebaseNeverPinsAgainInItsNextRound(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	rtx{"acme", "sp", "BRL", "2026-11-27", "a", "INCOME", "10", "food"}.put(t, e, "")
	c := newConsumer(t, e, "batch", nil, processor.Config{})
	c.pass()
	stop, done := c.passEvery(20 * time.Millisecond)
	const id = "rb-s26-b3"
	var once sync.Once
	var steps []string
	res, err := processor.Rebase(ctx, e.ddb, e.table, processor.RebaseOptions{ID: id, Tenant: "acme", Branch: "sp", Wait: time.Minute, Poll: 20 * time.Millisecond,
		Log: func(format string, args ...any) {
			steps = append(steps, format)
			if strings.HasPrefix(format, "B2:") {
				once.Do(func() {
					_, err := e.ddb.UpdateItem(ctx, table.AbandonRebase(table.CoordinationTableName(e.table), "acme", "sp", id))
					require.NoError(t, err)
				})
			}
		}})
	close(stop)
	<-done
	require.Error(t, err, "rounds %d, steps %v", res.Rounds, steps)
	assert.Contains(t, err.Error(), "abandoned")
	assert.Empty(t, appliedOf(t, e, "acme", "sp").Rebasing)
}

// S26-B5: B5 cut its writes into transactions by count alone, so a
// report's item could land in one transaction and its entry items in the
// next; when that one never lands (the round fails its pin, the rebase
// stops or dies) the report reads neither as before nor as rebased (a
// head with 32 names inline and the others missing). Here 93 daily and 4
// monthly reports come before the yearly one, whose 40 categories make 8
// entry items: cut at 98, its item was the last write of the first
// transaction and its entry items in the second.
func TestReviewS26_B5_AReportsWritesAreNeverCutBetweenTwoTransactionsOfB5(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := ninetyThreeDaysLost(t, e) // every report of the branch lost: B5 writes them all
	stop, done := c.passEvery(20 * time.Millisecond)
	var mu sync.Mutex
	inTx := map[string][]int{} // the yearly report's writes: the transactions they were in
	n := 0
	api := &txHook{RebaseAPI: e.ddb, before: func(in *dynamodb.TransactWriteItemsInput) {
		mu.Lock()
		defer mu.Unlock()
		n++
		for _, it := range in.TransactItems {
			if it.Put == nil {
				continue
			}
			k := table.KeyOf(it.Put.Item)
			if k.PK == aggregates.ReportPK("acme", "sp") && strings.HasPrefix(k.SK, "YEARLY#2026") {
				inTx[k.SK] = append(inTx[k.SK], n)
			}
		}
	}}
	res, err := processor.Rebase(ctx, api, e.table, processor.RebaseOptions{Tenant: "acme", Branch: "sp", Wait: time.Minute, Poll: 20 * time.Millisecond})
	close(stop)
	<-done
	require.NoError(t, err)
	t.Logf("transactions %d, reports %d, yearly writes in %v", res.Transactions, res.Reports, inTx)
	assert.Equal(t, 2, res.Transactions)
	require.Len(t, inTx, 9, "the yearly report's item and its 8 entry items")
	txs := map[int]bool{}
	for _, in := range inTx {
		for _, i := range in {
			txs[i] = true
		}
	}
	assert.Len(t, txs, 1, "the yearly report's writes were cut between transactions: %v", inTx)
	c.pass()
	e.requireReconciled(t)
}

// S26-B7: B5's first transaction lands, rewriting reports, and its second
// is cancelled (a commit of the branch meanwhile); the rounds run out.
// The rebase's error said only "busy": the reports it rewrote moved
// without the tenant's roll-ups, and nothing named them (ledgerctl names
// them on success only).
func TestReviewS26_B7_ARebaseThatStopsAfterALandedTransactionNamesTheRollups(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := ninetyThreeDaysLost(t, e)
	stop, done := make(chan struct{}), make(chan struct{})
	var paused sync.Mutex // held by the hook while it commits
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				paused.Lock()
				c.pass()
				paused.Unlock()
			}
		}
	}()
	n := 0
	api := &txHook{RebaseAPI: e.ddb, before: func(*dynamodb.TransactWriteItemsInput) {
		if n++; n == 2 { // a record of the branch committed between B5's transactions
			paused.Lock()
			defer paused.Unlock()
			rtx{"acme", "sp", "BRL", "2026-06-01", "late", "INCOME", "5", "late"}.put(t, e, "")
			c.pass()
		}
	}}
	_, err := processor.Rebase(ctx, api, e.table, processor.RebaseOptions{Tenant: "acme", Branch: "sp", Rounds: 1, Wait: time.Minute, Poll: 20 * time.Millisecond})
	close(stop)
	<-done
	require.ErrorIs(t, err, processor.ErrRebaseBusy)
	assert.Contains(t, err.Error(), "roll-ups are unproven")
}

// ninetyThreeDaysLost commits 93 daily transactions of acme/sp (40
// categories: the yearly report has 8 entry items) with a batch consumer,
// then deletes every report item of the branch, and returns the consumer.
func ninetyThreeDaysLost(t *testing.T, e *env) *consumer {
	t.Helper()
	day := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 93 {
		d := day.AddDate(0, 0, i).Format("2006-01-02")
		rtx{"acme", "sp", "BRL", d, fmt.Sprintf("t%02d", i), "INCOME", "1", fmt.Sprintf("cat%02d", i%40)}.put(t, e, "")
	}
	c := newConsumer(t, e, "batch", nil, processor.Config{})
	c.pass()
	for _, item := range scanAll(t, e) {
		if pk, _ := table.String(item, table.AttrPK); pk == aggregates.ReportPK("acme", "sp") {
			_, err := e.ddb.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: &e.table, Key: table.Key(table.KeyOf(item))})
			require.NoError(t, err)
		}
	}
	return c
}
