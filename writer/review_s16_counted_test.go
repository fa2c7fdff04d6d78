package writer_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/compact"
	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/rebucket"
	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// The adversarial review of session 16 (docs/exactly-once.md, "Review
// (adversarial, session 16): counted changes, sig and tombstones as
// built"): every write path of the writer against the invariant the
// counted repair will rely on — changes counts exactly the writes that
// made a stream record of the item, and sig matches what the item holds.
// Each test names the sequence it plays; the ones that found a hole fail
// without its fix.

// A write whose answer is lost (the write landed) and the client's retry
// with its Idempotency-Key: the item counts the one write, its history has
// one entry for it, and the retry is answered as the write was.
func TestReviewS16_ALostAnswerAndTheRetryCountTheWriteOnce(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"PATCH", "DELETE"} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, sharedTable(t))
			tx := e.create(`{"type":"EXPENSE","amount":"7","category":"c","createdAt":"2026-11-20T12:00:00Z"}`)
			var lost sync.Once
			e.calls.Decide = func(op string) ledgertest.Fault {
				f := ledgertest.Pass
				if op == "TransactWriteItems" {
					lost.Do(func() { f = ledgertest.LoseAnswer })
				}
				return f
			}
			t.Cleanup(func() { e.calls.Decide = nil })
			key := newKey()
			rq := req{method: method, path: e.base() + "/transactions/" + tx.ID,
				headers: []string{"If-Match", `"1"`, "Idempotency-Key", key}}
			want := http.StatusNoContent
			if method == "PATCH" {
				rq.body, want = `{"amount":"8"}`, http.StatusOK
			}
			first := e.send(rq) // whatever it answers: the write landed
			t.Logf("first answer: %s", first)
			retry := e.send(rq)
			require.Equal(t, want, retry.Status, "the retry: %s", retry)
			e.requireCounted(tx, 2)
			assert.Len(t, e.allHistory(tx.ID, 10), 2, "one entry for the write")
		})
	}
}

// Eight concurrent edits of one transaction at the same version: one
// lands, the others are 412; the count moved once.
func TestReviewS16_ConcurrentEditsAtOneVersionCountOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"EXPENSE","amount":"7","category":"c","createdAt":"2026-11-20T12:00:00Z"}`)
	const n = 8
	status := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID,
				body: fmt.Sprintf(`{"amount":"%d"}`, 100+i), headers: []string{"If-Match", `"1"`}})
			status[i] = r.Status
		}()
	}
	wg.Wait()
	won := -1
	for i, st := range status {
		if st == http.StatusOK {
			require.Equal(t, -1, won, "one edit lands: %v", status)
			won = i
			continue
		}
		assert.Equal(t, http.StatusPreconditionFailed, st, "the others are 412: %v", status)
	}
	require.NotEqual(t, -1, won, "one edit lands: %v", status)
	item := e.requireCounted(tx, 2)
	assert.Equal(t, strconv.Itoa(100+won), item[table.AttrAmount].(*ddbtypes.AttributeValueMemberN).Value)
}

// An edit racing a delete, both ways. The delete lands between the PATCH's
// read and its write: the PATCH is 404 (the tombstone is no
// transaction), and the tombstone counts the create and the delete. The
// PATCH lands between the DELETE's read and its write: a DELETE that named
// the version is 412, one that did not reads again and deletes the edited
// transaction, counting all three writes.
func TestReviewS16_AnEditRacingADelete(t *testing.T) {
	t.Parallel()
	const body = `{"type":"EXPENSE","amount":"7","category":"c","createdAt":"2026-11-20T12:00:00Z"}`
	t.Run("delete first", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, sharedTable(t))
		tx := e.create(body)
		path := e.base() + "/transactions/" + tx.ID
		e.raceHook("TransactWriteItems", func() {
			r := e.send(req{method: "DELETE", path: path})
			require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
		})
		r := e.send(req{method: "PATCH", path: path, body: `{"amount":"8"}`, headers: []string{"If-Match", `"1"`}})
		assert.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)
		item := e.requireCounted(tx, 2)
		assert.True(t, table.IsTombstone(item))
	})
	for _, ifMatch := range []string{`"1"`, ""} {
		t.Run("edit first/If-Match="+ifMatch, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, sharedTable(t))
			tx := e.create(body)
			path := e.base() + "/transactions/" + tx.ID
			e.raceHook("TransactWriteItems", func() {
				r := e.send(req{method: "PATCH", path: path, body: `{"amount":"8"}`, headers: []string{"If-Match", `"1"`}})
				require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
			})
			rq := req{method: "DELETE", path: path}
			if ifMatch != "" {
				rq.headers = []string{"If-Match", ifMatch}
			}
			r := e.send(rq)
			if ifMatch != "" {
				assert.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
				e.requireCounted(tx, 2)
				return
			}
			assert.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
			item := e.requireCounted(tx, 3)
			assert.True(t, table.IsTombstone(item))
		})
	}
}

// rebucketHook runs before ahead of rebucket's first UpdateItem.
type rebucketHook struct {
	*dynamodb.Client
	once   sync.Once
	before func()
}

func (h *rebucketHook) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	h.once.Do(h.before)
	return h.Client.UpdateItem(ctx, in, opts...)
}

// A DELETE between ledgerctl rebucket's read of a transaction and its
// restamp: the restamp fails its count condition, reads the tombstone
// again and leaves it alone; the tombstone counts the create and the
// delete only.
func TestReviewS16_ADeleteBetweenARebucketsReadAndItsWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, sharedTable(t))
	e.branchWithCalendar("sp", saoPaulo)
	e.branch = "sp"
	tx := e.create(`{"type":"EXPENSE","amount":"2.5","category":"c","createdAt":"2026-03-05T02:00:00Z"}`)
	r := e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/sp", body: `{"calendar":{"timeZone":"UTC","dayStartsAt":"00:00"}}`,
		headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	api := &rebucketHook{Client: e.ddb, before: func() {
		r := e.send(req{method: "DELETE", path: e.base() + "/transactions/" + tx.ID})
		require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
	}}
	res, err := rebucket.Run(ctx, api, e.table, e.tenant, "sp", rebucket.Options{Settle: -1, Parallel: 1})
	require.NoError(t, err)
	assert.Equal(t, 0, res.Moved)
	assert.Equal(t, 1, res.Deleted, "read again: a tombstone")
	item := e.requireCounted(tx, 2)
	assert.True(t, table.IsTombstone(item))
	assert.NotContains(t, item, aggregates.AttrBusinessDate, "the tombstone was not restamped")
}

// A create whose id collides with a transaction deleted and compacted
// since: the tombstone is gone, but the deleted transaction's history
// entries are kept for ever (store_history.go) and the create's entry is
// put only where none is, so the create takes a new id. Ids are never
// reused after compaction either (the design said only the id
// generator's randomness keeps them apart).
func TestReviewS16_ACreateOnACompactedIdTakesANewId(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	entropy := &stuckEntropy{same: 2}
	e := newEnv(t, ownTable(t), func(cfg *writer.Config) { cfg.Entropy = entropy })
	const body = `{"type":"EXPENSE","amount":"5","category":"c","createdAt":"2026-11-20T12:00:00Z"}`
	first := e.create(body)
	k := table.KeyOf(e.transactionItem(first))
	r := e.send(req{method: "DELETE", path: e.base() + "/transactions/" + first.ID})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
	res, err := compact.Run(ctx, e.ddb, e.table, table.CoordinationTableName(e.table),
		compact.Options{Now: func() time.Time { return time.Now().Add(72 * time.Hour) }})
	require.NoError(t, err)
	require.Equal(t, 1, res.Compacted)
	require.Nil(t, e.getItem(k), "compacted")

	second := e.create(body)
	assert.NotEqual(t, first.ID, second.ID, "a new id")
	assert.Equal(t, int64(3), entropy.n.Load(), "the second create collided once with the compacted id")
	h := e.allHistory(first.ID, 10)
	require.Len(t, h, 2, "the compacted transaction's history is intact")
	assert.Equal(t, "deleted", h[1].Operation)
}

// putRaw stores item under the key of tx as it is (another path's write).
func (e *env) putRaw(item map[string]ddbAV) {
	e.t.Helper()
	_, err := e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &e.table, Item: item})
	require.NoError(e.t, err)
}

// A transaction whose change count another path stored in a form that is
// not an integer (a string, a fraction): before the fix every PATCH and
// DELETE of it conditioned on attribute_not_exists(changes), failed, read
// the same version again and went round until 409 "the resource kept
// changing", for ever (each round a failed transactional write, billed).
// Now the write conditions on the count as stored and counts itself 1, as
// for an item without a count (its record does not step the count: the
// consumers will take it for foreign, and a rebase names the key).
func TestReviewS16_AnUnreadableCountDoesNotStickTheTransaction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		changes ddbAV
	}{
		{"string", s("3")},
		{"fraction", &ddbtypes.AttributeValueMemberN{Value: "2.5"}},
		{"null", &ddbtypes.AttributeValueMemberNULL{Value: true}},
		{"map", &ddbtypes.AttributeValueMemberM{Value: map[string]ddbAV{"n": s("3")}}},
	} {
		for _, method := range []string{"PATCH", "DELETE"} {
			t.Run(tc.name+"/"+method, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, sharedTable(t))
				tx := e.create(`{"type":"EXPENSE","amount":"7","category":"c","createdAt":"2026-11-20T12:00:00Z"}`)
				item := e.transactionItem(tx)
				item[table.AttrChanges] = tc.changes
				e.putRaw(item)
				rq := req{method: method, path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"1"`}}
				want := http.StatusNoContent
				if method == "PATCH" {
					rq.body, want = `{"amount":"8"}`, http.StatusOK
				}
				r := e.send(rq)
				require.Equal(t, want, r.Status, "answer %s", r)
				e.requireCounted(tx, 1)
			})
		}
	}
}

// A transaction stored without a version (written before versions, or by
// another path; the DELETE handles it: read 0, attribute_not_exists): its
// PATCH conditioned on version = 0, which no stored item holds, so it
// failed for ever (412 "version 0" before counted changes; 409 since, as
// recountOr read the same version 0 again and prepared it again until
// the attempts ran out). Now it conditions on no version, as the DELETE
// does, and makes it version 1.
func TestReviewS16_APatchOfATransactionStoredWithoutAVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	model := e.create(`{"type":"EXPENSE","amount":"7","category":"c","createdAt":"2026-11-20T12:00:00Z"}`)
	// The legacy item: another id (so no history entry, as before
	// versions), no version.
	tx := model
	tx.ID = model.ID[:len(model.ID)-1] + map[bool]string{true: "1", false: "0"}[model.ID[len(model.ID)-1] == '0']
	item := e.transactionItem(model)
	item[table.AttrSK] = s(model.CreatedAt[:10] + "#" + tx.ID)
	item[table.AttrID] = s(tx.ID)
	delete(item, table.AttrVersion)
	table.Count(item, 1)
	e.putRaw(item)
	r := e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, body: `{"amount":"8"}`, headers: []string{"If-Match", "*"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, int64(1), r.transaction(t).Version)
	stored := e.requireCounted(tx, 2)
	v, _ := table.Int64(stored, table.AttrVersion)
	assert.Equal(t, int64(1), v)
}

// A tenant's token cannot write the bookkeeping: a create or a PATCH
// naming changes, sig, deletedAt, probe or compacting is refused as an
// unknown field, and nothing is written (a tenant cannot forge a
// tombstone, a count or a digest).
func TestReviewS16_ATenantCannotWriteTheBookkeeping(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"EXPENSE","amount":"7","category":"c","createdAt":"2026-11-20T12:00:00Z"}`)
	for _, field := range []string{table.AttrChanges, table.AttrSig, table.AttrDeletedAt, table.AttrProbe, table.AttrCompacting} {
		r := e.send(req{method: "POST", path: e.base() + "/transactions", headers: []string{"Idempotency-Key", newKey()},
			body: fmt.Sprintf(`{"type":"EXPENSE","amount":"7","category":"c","createdAt":"2026-11-20T12:00:00Z",%q:"1"}`, field)})
		assert.Equal(t, http.StatusBadRequest, r.Status, "create with %s: %s", field, r)
		r = e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"1"`},
			body: fmt.Sprintf(`{%q:"1"}`, field)})
		assert.Equal(t, http.StatusBadRequest, r.Status, "patch with %s: %s", field, r)
	}
	e.requireCounted(tx, 1)
	assert.Len(t, e.listAll(e.branch), 1, "nothing created")
}

// A writer of the version before tombstones (b26a61f^: it counts, but
// has no live(): it reads a tombstone as a transaction with its fields
// missing) still serving after the flag tombstones went on — the runbook
// said "the writer may go before or after", and a rolled-back writer is
// the same. Before the fix, a client's PATCH that sets type, amount and
// category (what that version's 422 asks for: "the stored transaction is
// invalid here and the patch must set it") made a valid transaction again,
// written as that version writes it (GetItem, DecodeTransaction, the
// patch, EncodeTransaction, the count read plus one with its sig, a Put
// on condition of the version and the count): every condition held on the
// tombstone, the record was writer-shaped, and the consumers folded the
// deleted transaction back in — a lost delete nothing could tell (GET
// answered 200 with the amount 9). And that version's DELETE hard-deleted
// the tombstone (an unmarked REMOVE: its count lost). Now a tombstone
// holds its version as a string: that version reads it as none (0), its
// PATCH's condition (version = :expected) and its DELETE's (no version)
// both fail, and the tombstone stays as it was. (Its GET and listings
// still show a ghost with the fields missing: the runbook's order, the
// writer before the flag, is what keeps those away.)
func TestReviewS16_APreviousWriterCannotWriteOverATombstone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"EXPENSE","amount":"7","category":"c","createdAt":"2026-11-20T12:00:00Z"}`)
	r := e.send(req{method: "DELETE", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
	item := e.transactionItem(tx)
	k := table.KeyOf(item)
	c, _ := table.Changes(item)
	// The previous version reads the version as it decodes it (0 when it
	// is no number) and conditions on it so.
	read, _ := table.Int64(item, table.AttrVersion)
	versionCond := func() (string, map[string]ddbAV) {
		if read == 0 {
			return "attribute_not_exists(#v)", map[string]ddbAV{":changes": table.Int(c)}
		}
		return "#v = :expected", map[string]ddbAV{":expected": table.Int(read), ":changes": table.Int(c)}
	}
	cancelled := func(err error) bool {
		var tce *ddbtypes.TransactionCanceledException
		return errors.As(err, &tce)
	}

	// Its PATCH, step by step.
	old := table.DecodeTransaction(item)
	old.Type, old.Amount, old.Category = "EXPENSE", "9", "c"
	old.Version++
	next, err := table.EncodeTransaction(k, old)
	require.NoError(t, err, "a valid transaction again")
	table.Count(next, c+1)
	cond, values := versionCond()
	_, err = e.ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{{Put: &ddbtypes.Put{
		TableName: &e.table, Item: next,
		ConditionExpression:       ptr("attribute_exists(#pk) AND " + cond + " AND #changes = :changes"),
		ExpressionAttributeNames:  map[string]string{"#pk": table.AttrPK, "#v": table.AttrVersion, "#changes": table.AttrChanges},
		ExpressionAttributeValues: values,
	}}}})
	assert.True(t, cancelled(err), "the previous version's PATCH fails its condition: %v", err)

	// Its DELETE (a DeleteItem on the version read).
	cond, values = versionCond()
	delete(values, ":changes")
	if len(values) == 0 {
		values = nil
	}
	_, err = e.ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{{Delete: &ddbtypes.Delete{
		TableName: &e.table, Key: table.Key(k),
		ConditionExpression:       ptr("attribute_exists(#pk) AND " + cond),
		ExpressionAttributeNames:  map[string]string{"#pk": table.AttrPK, "#v": table.AttrVersion},
		ExpressionAttributeValues: values,
	}}}})
	assert.True(t, cancelled(err), "the previous version's DELETE fails its condition: %v", err)

	got := e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID})
	assert.Equal(t, http.StatusNotFound, got.Status, "a deleted transaction stays deleted: %s", got)
	after := e.requireCounted(tx, 2)
	assert.True(t, table.IsTombstone(after))
}

// A rebucket restamp whose answer is lost (the UpdateItem landed; it has
// no idempotency token, so the SDK sends it again): the repeat fails its
// count condition, rebucket reads the item again and finds it in its
// calendar. The restamp is counted once, never twice.
func TestReviewS16_ARebucketRestampWhoseAnswerIsLostCountsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, sharedTable(t))
	e.branchWithCalendar("sp", saoPaulo)
	e.branch = "sp"
	tx := e.create(`{"type":"EXPENSE","amount":"2.5","category":"c","createdAt":"2026-03-05T02:00:00Z"}`)
	r := e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/sp", body: `{"calendar":{"timeZone":"UTC","dayStartsAt":"00:00"}}`,
		headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)

	faults := &ledgertest.FaultTransport{}
	var lost sync.Once
	faults.Decide = func(op string) ledgertest.Fault {
		f := ledgertest.Pass
		if op == "UpdateItem" {
			lost.Do(func() { f = ledgertest.LoseAnswer })
		}
		return f
	}
	api := dynamodb.NewFromConfig(ddbtest.Config(t, infra.WithTransportWrapper(func(next http.RoundTripper) http.RoundTripper {
		faults.Next = next
		return faults
	})))
	_, err := rebucket.Run(ctx, api, e.table, e.tenant, "sp", rebucket.Options{Settle: -1, Parallel: 1})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, faults.Calls("UpdateItem"), 2, "the restamp was sent again")
	item := e.requireCounted(tx, 2) // created, restamped once
	assert.Equal(t, "2026-03-05", item[aggregates.AttrBusinessDate].(*ddbtypes.AttributeValueMemberS).Value)
}
