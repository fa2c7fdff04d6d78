package writer_test

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/rebucket"
	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// The counted changes of docs/exactly-once.md ("The design: counted
// changes", W): every write of a transaction item counts itself in
// changes and stores the sig of what it wrote.

// requireCounted requires the stored item of tx to hold changes = want and
// the sig of what it holds, and no probe.
func (e *env) requireCounted(tx writer.Transaction, want int64) map[string]ddbAV {
	e.t.Helper()
	item := e.transactionItem(tx)
	got, ok := table.Changes(item)
	require.True(e.t, ok, "changes stored")
	require.Equal(e.t, want, got, "changes")
	require.True(e.t, table.SigMatches(item), "sig matches the item")
	require.NotContains(e.t, item, table.AttrProbe)
	return item
}

func TestCountedChanges_EveryWriteStepsTheCountAndStoresItsSig(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"EXPENSE","amount":"12.50","category":"food","costCenter":"ops","createdAt":"2026-11-20T12:00:00Z"}`)
	first := e.requireCounted(tx, 1)

	for i, body := range []string{
		`{"amount":"13"}`,
		`{"costCenter":null,"paymentMethod":"card"}`,
		`{"amount":"13"}`,     // the same figures: still a new version, so a new count and a record
		`{"category":"food"}`, // the same again
	} {
		r := e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, body: body,
			headers: []string{"If-Match", strconv.Quote(strconv.Itoa(i + 1))}})
		require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
		e.requireCounted(tx, int64(i+2))
	}
	last := e.transactionItem(tx)
	assert.NotEqual(t, first[table.AttrSig], last[table.AttrSig], "the count is in the sig")
}

// A ledgerctl rebucket that restamps a transaction between a PATCH's read
// and its write moves the count, not the version: the PATCH is prepared
// again on the count rebucket left (never a 412, and never a count that
// skips the rebucket's record).
func TestCountedChanges_ARebucketBetweenReadAndWriteIsPreparedAgainNotA412(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx, moved := e.rebucketBeforeNextWrite(t)
	r := e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"1"`}, body: `{"amount":"3"}`})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	require.Equal(t, 1, *moved, "the rebucket restamped it in between")
	assert.Equal(t, int64(2), r.transaction(t).Version)
	e.requireCounted(tx, 3) // created, restamped, patched
}

// ledgerctl rebucket counts its restamp as a change of the item, and drops
// a probe left on it.
func TestCountedChanges_RebucketCountsItsRestamp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, sharedTable(t))
	e.branchWithCalendar("sp", saoPaulo)
	e.branch = "sp"
	tx := e.create(`{"type":"EXPENSE","amount":"2.5","category":"c","createdAt":"2026-03-05T02:00:00Z"}`)
	r := e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/sp", body: `{"calendar":{"timeZone":"UTC","dayStartsAt":"00:00"}}`,
		headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	k := table.KeyOf(e.transactionItem(tx))
	_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table, Key: table.Key(k),
		UpdateExpression: ptr("SET probe = :p"), ExpressionAttributeValues: map[string]ddbAV{":p": s("rebase-1")}})
	require.NoError(t, err)
	res, err := rebucket.Run(ctx, e.ddb, e.table, e.tenant, "sp", rebucket.Options{Settle: -1, Parallel: 1})
	require.NoError(t, err)
	require.Equal(t, 1, res.Moved)
	item := e.requireCounted(tx, 2)
	assert.Equal(t, "2026-03-05", item["businessDate"].(*ddbtypes.AttributeValueMemberS).Value)
}

// The writer's DELETE leaves a tombstone (exactly-once.md, W): the fields
// removed, deletedAt set, the version and the count moved, the key kept;
// every read of the API takes it for no transaction, and the audit trail
// records the delete.
func TestTombstones_ADeleteLeavesATombstoneEveryReadTakesForNone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"INCOME","amount":"40","category":"sales","costCenter":"shop","paymentMethod":"pix","description":"d","createdAt":"2026-11-20T12:00:00Z"}`)
	path := e.base() + "/transactions/" + tx.ID
	r := e.send(req{method: "DELETE", path: path, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)

	item := e.requireCounted(tx, 2)
	for _, name := range table.TombstoneRemoves {
		assert.NotContains(t, item, name, "removed by the delete")
	}
	assert.Contains(t, item, table.AttrDeletedAt)
	assert.Equal(t, s("2"), item[table.AttrVersion], "the delete is version 2, as its history entry; a string, the fence against a writer before tombstones (review of session 16)")
	_, err := table.ParseTransaction(item)
	assert.ErrorIs(t, err, aggregates.ErrDeleted, "absent to the consumers, not invalid")

	for _, rq := range []req{
		{method: "GET", path: path},
		{method: "PATCH", path: path, body: `{"amount":"41"}`, headers: []string{"If-Match", `"2"`}},
		{method: "DELETE", path: path},
		{method: "DELETE", path: path, headers: []string{"If-Match", `"2"`}},
	} {
		r := e.send(rq)
		assert.Equal(t, http.StatusNotFound, r.Status, "%s: answer %s", rq.method, r)
	}
	assert.Empty(t, e.listAll(e.branch), "not listed")
	h := e.allHistory(tx.ID, 10)
	require.Len(t, h, 2)
	assert.Equal(t, "deleted", h[1].Operation)
	assert.Equal(t, "40", h[1].Transaction.Amount, "the entry keeps the transaction as deleted")
	e.requireCounted(tx, 2) // the refused writes wrote nothing
}

// Listings skip tombstones, and paging over them loses and repeats nothing,
// with and without filters.
func TestTombstones_ListingsSkipThemAndPageOverThem(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	var live []string
	for i := range 12 {
		typ := "INCOME"
		if i%3 == 0 {
			typ = "EXPENSE"
		}
		tx := e.create(fmt.Sprintf(`{"type":%q,"amount":"%d","category":"c","createdAt":"2026-11-%02dT12:00:00Z"}`, typ, i+1, i+1))
		if i%4 == 1 || i%4 == 2 { // half of them, in runs of two
			r := e.send(req{method: "DELETE", path: e.base() + "/transactions/" + tx.ID})
			require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
			continue
		}
		live = append([]string{tx.ID}, live...) // newest first
	}
	for _, tc := range []struct {
		query string
		want  func(id string) bool
	}{
		{"", nil},
		{"&type=INCOME", nil},
		{"&from=2026-11-03&to=2026-11-10", nil},
		{"&businessDateFrom=2026-11-02", nil},
	} {
		for _, limit := range []int{1, 2, 5, 50} {
			t.Run(fmt.Sprintf("%s/limit=%d", tc.query, limit), func(t *testing.T) {
				var got []string
				cursor := ""
				for pages := 0; ; pages++ {
					require.Less(t, pages, 40, "paging ends")
					path := fmt.Sprintf("%s/transactions?limit=%d%s", e.base(), limit, tc.query)
					if cursor != "" {
						path += "&cursor=" + url.QueryEscape(cursor)
					}
					r := e.send(req{method: "GET", path: path})
					require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
					var page writer.ListPage
					require.NoError(t, json.Unmarshal(r.Body, &page))
					require.LessOrEqual(t, len(page.Items), limit)
					for _, it := range page.Items {
						got = append(got, it.ID)
					}
					if cursor = page.NextCursor; cursor == "" {
						break
					}
				}
				var want []string
				all := e.listUnfiltered(tc.query)
				for _, id := range live {
					if all[id] {
						want = append(want, id)
					}
				}
				assert.Equal(t, want, got)
			})
		}
	}
}

// listUnfiltered lists the branch in one page of 200 with query's filters,
// as a set.
func (e *env) listUnfiltered(query string) map[string]bool {
	e.t.Helper()
	r := e.send(req{method: "GET", path: e.base() + "/transactions?limit=200" + query})
	require.Equal(e.t, http.StatusOK, r.Status, "answer %s", r)
	var page writer.ListPage
	require.NoError(e.t, json.Unmarshal(r.Body, &page))
	require.Empty(e.t, page.NextCursor)
	out := map[string]bool{}
	for _, it := range page.Items {
		out[it.ID] = true
	}
	return out
}

// stuckEntropy gives the same bytes to the first n ids, then random ones:
// the n-th create collides with the first.
type stuckEntropy struct {
	n    atomic.Int64
	same int64
}

func (s *stuckEntropy) Read(p []byte) (int, error) {
	if s.n.Add(1) <= s.same {
		clear(p)
		return len(p), nil
	}
	return cryptorand.Read(p)
}

// A create whose id is a tombstone's fails its condition as on any existing
// id, and takes a new id: ids are never reused.
func TestTombstones_ACreateOnATombstonedIdTakesANewId(t *testing.T) {
	t.Parallel()
	entropy := &stuckEntropy{same: 2}
	e := newEnv(t, sharedTable(t), func(cfg *writer.Config) { cfg.Entropy = entropy })
	const body = `{"type":"EXPENSE","amount":"5","category":"c","createdAt":"2026-11-20T12:00:00Z"}`
	first := e.create(body)
	r := e.send(req{method: "DELETE", path: e.base() + "/transactions/" + first.ID})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)

	second := e.create(body)
	assert.NotEqual(t, first.ID, second.ID, "a new id")
	assert.Equal(t, int64(3), entropy.n.Load(), "the second create collided once with the tombstone")
	e.requireCounted(first, 2) // the tombstone untouched
	e.requireCounted(second, 1)
	assert.Equal(t, []string{second.ID}, idsOf(e.listAll(e.branch)))
}

func idsOf(txs []writer.Transaction) []string {
	out := make([]string, len(txs))
	for i, tx := range txs {
		out[i] = tx.ID
	}
	return out
}

// A rebucket between a DELETE's read and its write moves the count, not
// the version: the delete is prepared again, even when If-Match named the
// version (never a 412 for it), and the tombstone counts every change.
func TestTombstones_ARebucketBetweenADeletesReadAndWriteIsPreparedAgain(t *testing.T) {
	t.Parallel()
	for _, ifMatch := range []string{"", `"1"`} {
		t.Run("If-Match="+ifMatch, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t, sharedTable(t))
			tx, moved := e.rebucketBeforeNextWrite(t)
			var headers []string
			if ifMatch != "" {
				headers = []string{"If-Match", ifMatch}
			}
			r := e.send(req{method: "DELETE", path: e.base() + "/transactions/" + tx.ID, headers: headers})
			require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
			require.Equal(t, 1, *moved)
			e.requireCounted(tx, 3) // created, restamped, deleted
			res, err := rebucket.Run(ctx, e.ddb, e.table, e.tenant, "sp", rebucket.Options{Settle: -1, Parallel: 1})
			require.NoError(t, err)
			assert.Equal(t, rebucket.Result{Branches: 1, Transactions: 1, Deleted: 1}, res, "a tombstone is left alone")
		})
	}
}

// A retried DELETE with its Idempotency-Key replays 204, as before
// tombstones.
func TestTombstones_ARetriedDeleteReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"EXPENSE","amount":"5","category":"c","createdAt":"2026-11-20T12:00:00Z"}`)
	key := newKey()
	for range 2 {
		r := e.send(req{method: "DELETE", path: e.base() + "/transactions/" + tx.ID, headers: []string{"Idempotency-Key", key}})
		require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
	}
	e.requireCounted(tx, 2)
}

// On a table whose flags do not turn tombstones on (a table created
// before them, whose older consumers would quarantine a tombstone), the
// DELETE deletes the item, as before (the second review of issue 25, W-c).
func TestTombstones_OffByTheFlagADeleteDeletesTheItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, ownTable(t))
	f, err := table.GetFlags(ctx, e.ddb, e.table)
	require.NoError(t, err)
	require.True(t, f.Tombstones(), "a new table turns tombstones on")
	_, err = table.SetFlags(ctx, e.ddb, e.table, map[string]bool{table.FlagTombstones: false}, f.Version, time.Now())
	require.NoError(t, err) // before the env's writer serves its first request: it reads the flags afresh

	tx := e.create(`{"type":"EXPENSE","amount":"5","category":"c","createdAt":"2026-11-20T12:00:00Z"}`)
	k := table.KeyOf(e.transactionItem(tx))
	r := e.send(req{method: "DELETE", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
	assert.Nil(t, e.getItem(k), "deleted, no tombstone")
	h := e.allHistory(tx.ID, 10)
	require.Len(t, h, 2)
	assert.Equal(t, "deleted", h[1].Operation)
}

// A rebase's probe between a write's read and its commit moves the count
// and not the version (the second review's W-b): the PATCH or DELETE is
// prepared again on the probed item, never a 412, and its write removes
// the probe.
func TestCountedChanges_AProbeBetweenReadAndWriteIsPreparedAgain(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"PATCH", "DELETE"} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t, sharedTable(t))
			tx := e.create(`{"type":"EXPENSE","amount":"2.5","category":"c","createdAt":"2026-03-05T02:00:00Z"}`)
			e.raceHook("TransactWriteItems", func() {
				item := e.transactionItem(tx)
				item[table.AttrProbe] = s("rebase-1")
				table.Count(item, 2)
				item[table.AttrProbe] = s("rebase-1") // Count drops it; a probe keeps it
				item[table.AttrSig] = table.SigAV(table.Sig(item))
				_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: item})
				require.NoError(t, err)
			})
			rq := req{method: method, path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"1"`}}
			want := http.StatusNoContent
			if method == "PATCH" {
				rq.body, want = `{"amount":"3"}`, http.StatusOK
			}
			r := e.send(rq)
			require.Equal(t, want, r.Status, "answer %s", r)
			e.requireCounted(tx, 3) // created, probed, written: the probe removed
		})
	}
}

// rebucketBeforeNextWrite creates a transaction in branch sp (Sao Paulo's
// calendar), moves the branch to UTC's, and arranges for ledgerctl
// rebucket to restamp the transaction just before the writer's next
// TransactWriteItems (between a write's read and its write); moved is
// what that rebucket moved, once it has run.
func (e *env) rebucketBeforeNextWrite(t *testing.T) (tx writer.Transaction, moved *int) {
	t.Helper()
	e.branchWithCalendar("sp", saoPaulo)
	e.branch = "sp"
	tx = e.create(`{"type":"EXPENSE","amount":"2.5","category":"c","createdAt":"2026-03-05T02:00:00Z"}`)
	r := e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/sp", body: `{"calendar":{"timeZone":"UTC","dayStartsAt":"00:00"}}`,
		headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	moved = new(int)
	e.raceHook("TransactWriteItems", func() {
		res, err := rebucket.Run(context.Background(), e.ddb, e.table, e.tenant, "sp", rebucket.Options{Settle: -1, Parallel: 1})
		require.NoError(t, err)
		*moved = res.Moved
	})
	return tx, moved
}
