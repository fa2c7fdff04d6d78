package writer_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/writer"
)

// image converts a stored item for aggregates.ParseTransaction.
func image(item map[string]ddbtypes.AttributeValue) aggregates.Image {
	img := aggregates.Image{}
	for name, v := range item {
		switch v := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			img[name] = aggregates.Attr{Type: "S", Value: v.Value}
		case *ddbtypes.AttributeValueMemberN:
			img[name] = aggregates.Attr{Type: "N", Value: v.Value}
		default:
			img[name] = aggregates.Attr{Type: "?"}
		}
	}
	return img
}

func TestTransactions_CreateGetPatchDeleteLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))

	// Create: the amount as a string, createdAt with an offset whose UTC
	// date is the next day.
	r := e.send(req{method: "POST", path: e.base() + "/transactions", headers: []string{"Idempotency-Key", newKey()},
		body: `{"type":"EXPENSE","amount":"12.50","category":"café ☕","costCenter":"ops","paymentMethod":"card",
		        "description":"lunch #42","createdAt":"2024-02-29T23:59:59.5-03:00"}`})
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	tx := r.transaction(t)
	assert.Equal(t, e.base()+"/transactions/"+tx.ID, r.Header.Get("Location"))
	assert.Equal(t, `"1"`, r.Header.Get("ETag"))
	assert.Equal(t, "12.5", tx.Amount)
	assert.Equal(t, "2024-03-01T02:59:59.5Z", tx.CreatedAt)
	assert.Equal(t, int64(1), tx.Version)
	assert.Equal(t, e.tenant, tx.Tenant)
	assert.Equal(t, "north", tx.Branch)
	u, err := ulid.ParseStrict(tx.ID)
	require.NoError(t, err)
	assert.Equal(t, "2024-03-01T02:59:59.5Z", ulid.Time(u.Time()).UTC().Format(time.RFC3339Nano), "the id encodes createdAt")

	// Stored exactly as the stream consumers accept it.
	key := aggregates.TransactionKey(e.tenant, "north", aggregates.Date{Year: 2024, Month: 3, Day: 1}, tx.ID)
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &e.table, ConsistentRead: ptr(true),
		Key: map[string]ddbAV{"PK": s(key.PK), "SK": s(key.SK)}})
	require.NoError(t, err)
	require.NotNil(t, out.Item)
	assert.Equal(t, &ddbtypes.AttributeValueMemberN{Value: "12.5"}, out.Item["amount"])
	assert.Equal(t, &ddbtypes.AttributeValueMemberN{Value: "1"}, out.Item["version"])
	assert.Equal(t, s("TRANSACTION"), out.Item["entityType"])
	parsed, err := aggregates.ParseTransaction(image(out.Item))
	require.NoError(t, err)
	assert.Equal(t, "café ☕", parsed.Category)
	updated, err := time.Parse(time.RFC3339Nano, tx.UpdatedAt)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), updated, time.Minute)

	// Get: strongly consistent, same representation.
	r = e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, tx, r.transaction(t))
	assert.Equal(t, `"1"`, r.Header.Get("ETag"))

	// Patch: change the amount, remove the cost centre.
	r = e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"1"`},
		body: `{"amount": 20, "costCenter": null, "type": "INCOME"}`})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	patched := r.transaction(t)
	assert.Equal(t, "20", patched.Amount)
	assert.Equal(t, "INCOME", patched.Type)
	assert.Empty(t, patched.CostCenter)
	assert.Equal(t, "card", patched.PaymentMethod)
	assert.Equal(t, int64(2), patched.Version)
	assert.Equal(t, tx.CreatedAt, patched.CreatedAt)
	assert.Equal(t, `"2"`, r.Header.Get("ETag"))
	r = e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID})
	assert.Equal(t, patched, r.transaction(t))

	// Stale version: 412 with the current one.
	r = e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"1"`}, body: `{"amount":"1"}`})
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
	p := r.problem(t)
	assert.Equal(t, writer.ProblemVersionMismatch, p.Type)
	require.NotNil(t, p.CurrentVersion)
	assert.Equal(t, int64(2), *p.CurrentVersion)
	assert.Equal(t, `"2"`, r.Header.Get("ETag"))

	// createdAt is immutable.
	r = e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"2"`}, body: `{"createdAt":"2024-01-01T00:00:00Z"}`})
	require.Equal(t, http.StatusBadRequest, r.Status, "answer %s", r)
	p = r.problem(t)
	assert.Equal(t, writer.ProblemUnknownField, p.Type)
	assert.Equal(t, "createdAt", p.Field)
	assert.Contains(t, p.Detail, "encoded in the transaction's id")

	// Delete: stale version 412, current version 204, then 404.
	r = e.send(req{method: "DELETE", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
	assert.Equal(t, int64(2), *r.problem(t).CurrentVersion)
	r = e.send(req{method: "DELETE", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"2"`}})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
	assert.Empty(t, r.Body)
	r = e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID})
	require.Equal(t, http.StatusNotFound, r.Status)
	assert.Equal(t, writer.ProblemNotFound, r.problem(t).Type)
	r = e.send(req{method: "DELETE", path: e.base() + "/transactions/" + tx.ID})
	require.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)
	r = e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"2"`}, body: `{"amount":"1"}`})
	require.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)
}

func TestCreate_AmountsAreExactWhetherStringOrNumber(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	for body, want := range map[string]string{
		`{"type":"INCOME","amount":0.1,"category":"a"}`:                                         "0.1",
		`{"type":"INCOME","amount":"0.10","category":"a"}`:                                      "0.1",
		`{"type":"INCOME","amount":1234567890123456789012.12345678,"category":"a"}`:             "1234567890123456789012.12345678",
		`{"type":"INCOME","amount":"9999999999999999999999.99999999","category":"a"}`:           "9999999999999999999999.99999999",
		`{"type":"INCOME","amount":1e2,"category":"a"}`:                                         "100",
		`{"type":"INCOME","amount":"0.00000001","category":"a"}`:                                "0.00000001",
		`{"type":"EXPENSE","amount":12.5e-1,"category":"a","createdAt":"2026-01-31T12:00:00Z"}`: "1.25",
	} {
		tx := e.create(body)
		assert.Equal(t, want, tx.Amount, "body %s", body)
	}
}

func TestCreate_InvalidInputIs400WithTypeAndFieldAndWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	valid := map[string]any{"type": "INCOME", "amount": "1", "category": "food"}
	with := func(k string, v any) string {
		m := map[string]any{}
		for kk, vv := range valid {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	cases := []struct {
		name, body, typ, field string
	}{
		{"type missing", with("type", nil), writer.ProblemInvalidField, "type"},
		{"type lower case", with("type", "income"), writer.ProblemInvalidField, "type"},
		{"type not a string", with("type", 1), writer.ProblemInvalidField, "type"},
		{"amount missing", with("amount", nil), writer.ProblemInvalidField, "amount"},
		{"amount null", `{"type":"INCOME","amount":null,"category":"a"}`, writer.ProblemInvalidField, "amount"},
		{"amount zero", with("amount", "0"), writer.ProblemInvalidField, "amount"},
		{"amount negative", `{"type":"INCOME","amount":-5,"category":"a"}`, writer.ProblemInvalidField, "amount"},
		{"amount words", with("amount", "ten"), writer.ProblemInvalidField, "amount"},
		{"amount with spaces", with("amount", " 1"), writer.ProblemInvalidField, "amount"},
		{"amount leading plus", with("amount", "+1"), writer.ProblemInvalidField, "amount"},
		{"amount hex", with("amount", "0x10"), writer.ProblemInvalidField, "amount"},
		{"amount NaN", with("amount", "NaN"), writer.ProblemInvalidField, "amount"},
		{"amount bool", with("amount", true), writer.ProblemInvalidField, "amount"},
		{"amount 9 fraction digits", with("amount", "0.000000001"), writer.ProblemInvalidField, "amount"},
		{"amount 23 integer digits", with("amount", "12345678901234567890123"), writer.ProblemInvalidField, "amount"},
		{"amount huge exponent", `{"type":"INCOME","amount":1e999999999,"category":"a"}`, writer.ProblemInvalidField, "amount"},
		{"amount exponent out of range", `{"type":"INCOME","amount":1e400,"category":"a"}`, writer.ProblemInvalidField, "amount"},
		{"category missing", with("category", nil), writer.ProblemInvalidField, "category"},
		{"category empty", with("category", ""), writer.ProblemInvalidField, "category"},
		{"category with delimiter", with("category", "food#BRANCH#x"), writer.ProblemInvalidField, "category"},
		{"category too long", with("category", strings.Repeat("x", 65)), writer.ProblemInvalidField, "category"},
		{"category control character", with("category", "a\u0000b"), writer.ProblemInvalidField, "category"},
		{"cost centre with delimiter", with("costCenter", "a#b"), writer.ProblemInvalidField, "costCenter"},
		{"payment method not a string", with("paymentMethod", 5), writer.ProblemInvalidField, "paymentMethod"},
		{"description too long", with("description", strings.Repeat("d", 501)), writer.ProblemInvalidField, "description"},
		{"createdAt not RFC 3339", with("createdAt", "2024-02-30T00:00:00Z"), writer.ProblemInvalidField, "createdAt"},
		{"createdAt date only", with("createdAt", "2024-02-01"), writer.ProblemInvalidField, "createdAt"},
		{"createdAt before 1970", with("createdAt", "1969-12-31T23:59:59Z"), writer.ProblemInvalidField, "createdAt"},
		{"unknown field", with("foo", "bar"), writer.ProblemUnknownField, "foo"},
		{"field name in other case", `{"type":"INCOME","Amount":"1","category":"a"}`, writer.ProblemUnknownField, "Amount"},
		{"id is the server's", with("id", "01HZZZZZZZZZZZZZZZZZZZZZZZ"), writer.ProblemUnknownField, "id"},
		{"duplicate field", `{"type":"INCOME","amount":"1","amount":"2","category":"a"}`, writer.ProblemInvalidJSON, "amount"},
		{"not JSON", `type=INCOME`, writer.ProblemInvalidJSON, ""},
		{"array", `[{"type":"INCOME"}]`, writer.ProblemInvalidJSON, ""},
		{"trailing data", with("type", "INCOME") + `{}`, writer.ProblemInvalidJSON, ""},
		{"truncated", `{"type":"INCOME","amount":"1"`, writer.ProblemInvalidJSON, ""},
		{"empty", ``, writer.ProblemInvalidJSON, ""},
		{"invalid UTF-8", "{\"type\":\"INCOME\",\"amount\":\"1\",\"category\":\"\xff\"}", writer.ProblemInvalidJSON, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.send(req{method: "POST", path: e.base() + "/transactions", body: c.body, headers: []string{"Idempotency-Key", newKey()}})
			require.Equal(t, http.StatusBadRequest, r.Status, "answer %s", r)
			p := r.problem(t)
			assert.Equal(t, c.typ, p.Type)
			assert.Equal(t, c.field, p.Field)
			assert.NotEmpty(t, p.Detail)
			assert.NotEmpty(t, p.Title)
		})
	}

	t.Run("body too large", func(t *testing.T) {
		r := e.send(req{method: "POST", path: e.base() + "/transactions", body: with("description", strings.Repeat("d", 20000)), headers: []string{"Idempotency-Key", newKey()}})
		require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, "answer %s", r)
		assert.Equal(t, writer.ProblemBodyTooLarge, r.problem(t).Type)
	})
	t.Run("not JSON content type", func(t *testing.T) {
		r := e.send(req{method: "POST", path: e.base() + "/transactions", body: with("type", "INCOME"), headers: []string{"Idempotency-Key", newKey(), "Content-Type", "text/plain"}})
		require.Equal(t, http.StatusUnsupportedMediaType, r.Status, "answer %s", r)
		assert.Equal(t, writer.ProblemUnsupportedMediaType, r.problem(t).Type)
	})
	t.Run("no idempotency key", func(t *testing.T) {
		r := e.send(req{method: "POST", path: e.base() + "/transactions", body: with("type", "INCOME")})
		require.Equal(t, http.StatusBadRequest, r.Status, "answer %s", r)
		p := r.problem(t)
		assert.Equal(t, writer.ProblemIdempotencyKeyRequired, p.Type)
		assert.Equal(t, "Idempotency-Key", p.Field)
	})
	t.Run("idempotency key with delimiter", func(t *testing.T) {
		r := e.send(req{method: "POST", path: e.base() + "/transactions", body: with("type", "INCOME"), headers: []string{"Idempotency-Key", "a#b"}})
		require.Equal(t, http.StatusBadRequest, r.Status, "answer %s", r)
		assert.Equal(t, "Idempotency-Key", r.problem(t).Field)
	})
	assert.Zero(t, e.countTransactions(e.tenant, e.branch), "no invalid request wrote anything")
}

func TestPatch_InvalidRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"INCOME","amount":"5","category":"a"}`)
	path := e.base() + "/transactions/" + tx.ID
	cases := []struct {
		name    string
		headers []string
		body    string
		status  int
		typ     string
		field   string
	}{
		{"no If-Match", nil, `{"amount":"1"}`, 428, writer.ProblemPreconditionRequired, "If-Match"},
		// "*", weak tags and lists are evaluated (ifmatch_test.go); what is
		// not an entity tag is 400.
		{"If-Match not a tag", []string{"If-Match", "abc"}, `{"amount":"1"}`, 400, writer.ProblemInvalidField, "If-Match"},
		{"If-Match unclosed", []string{"If-Match", `"1`}, `{"amount":"1"}`, 400, writer.ProblemInvalidField, "If-Match"},
		{"If-Match weak without a tag", []string{"If-Match", `W/1`}, `{"amount":"1"}`, 400, writer.ProblemInvalidField, "If-Match"},
		{"empty patch", []string{"If-Match", `"1"`}, `{}`, 400, writer.ProblemInvalidJSON, ""},
		{"remove required field", []string{"If-Match", `"1"`}, `{"category":null}`, 400, writer.ProblemInvalidField, "category"},
		{"delimiter in category", []string{"If-Match", `"1"`}, `{"category":"x#y"}`, 400, writer.ProblemInvalidField, "category"},
		{"zero amount", []string{"If-Match", `"1"`}, `{"amount":0}`, 400, writer.ProblemInvalidField, "amount"},
		{"unknown field", []string{"If-Match", `"1"`}, `{"version":7}`, 400, writer.ProblemUnknownField, "version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.send(req{method: "PATCH", path: path, headers: c.headers, body: c.body})
			require.Equal(t, c.status, r.Status, "answer %s", r)
			p := r.problem(t)
			assert.Equal(t, c.typ, p.Type)
			assert.Equal(t, c.field, p.Field)
		})
	}
	t.Run("merge patch content type", func(t *testing.T) {
		r := e.send(req{method: "PATCH", path: path, headers: []string{"If-Match", "1", "Content-Type", "application/merge-patch+json"}, body: `{"description":"ok"}`})
		require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
		assert.Equal(t, "ok", r.transaction(t).Description)
	})
}

func TestPaths_DelimiterInjectionIs400AndTouchesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"INCOME","amount":"5","category":"a"}`)
	before := e.dynamoCalls()
	esc := url.PathEscape
	cases := []struct {
		name, method, path, body, field string
	}{
		{"branch with delimiter", "GET", "/v1/tenants/" + e.tenant + "/branches/" + esc("north#TRANSACTION") + "/transactions", "", "branch"},
		{"branch forging another branch", "POST", "/v1/tenants/" + e.tenant + "/branches/" + esc("x#BRANCH#north") + "/transactions", `{"type":"INCOME","amount":"1","category":"a"}`, "branch"},
		{"id with delimiter", "GET", e.base() + "/transactions/" + esc(tx.ID+"#x"), "", "id"},
		{"id not a ULID", "DELETE", e.base() + "/transactions/" + "not-an-id", "", "id"},
		{"id lower case", "GET", e.base() + "/transactions/" + strings.ToLower(tx.ID), "", "id"},
		{"category filter with delimiter", "GET", e.base() + "/transactions?category=" + url.QueryEscape("a#b"), "", "category"},
		{"report value with delimiter", "GET", e.base() + "/reports/MONTHLY/" + esc("2024-01#x"), "", "value"},
		{"report range with delimiter", "GET", e.base() + "/reports?period=DAILY&from=2024-01-01&to=" + url.QueryEscape("2024-01-02#"), "", "to"},
		{"branch with space", "GET", "/v1/tenants/" + e.tenant + "/branches/" + esc("no rth") + "/reports/YEARLY/2024", "", "branch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body any
			if c.body != "" {
				body = c.body
			}
			r := e.send(req{method: c.method, path: c.path, body: body, headers: []string{"Idempotency-Key", newKey()}})
			require.Equal(t, http.StatusBadRequest, r.Status, "answer %s", r)
			p := r.problem(t)
			assert.Equal(t, writer.ProblemInvalidField, p.Type)
			assert.Equal(t, c.field, p.Field)
		})
	}
	assert.Equal(t, before, e.dynamoCalls(), "no request reached DynamoDB")
}

func TestList_NewestFirstFilteredPaged(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	var created []writer.Transaction
	for i := 1; i <= 7; i++ {
		typ, cat := "INCOME", "sales"
		if i%2 == 0 {
			typ, cat = "EXPENSE", "rent"
		}
		created = append(created, e.create(`{"type":"`+typ+`","amount":"`+string(rune('0'+i))+`","category":"`+cat+
			`","createdAt":"2024-01-0`+string(rune('0'+i))+`T10:00:00Z"}`))
	}
	list := func(query string) writer.ListPage {
		t.Helper()
		r := e.send(req{method: "GET", path: e.base() + "/transactions?" + query})
		require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
		var page writer.ListPage
		require.NoError(t, json.Unmarshal(r.Body, &page))
		return page
	}
	ids := func(items []writer.Transaction) []string {
		var out []string
		for _, tx := range items {
			out = append(out, tx.ID)
		}
		return out
	}
	newestFirst := func(idx ...int) []string {
		var out []string
		for _, i := range idx {
			out = append(out, created[i-1].ID)
		}
		return out
	}

	all := list("")
	assert.Equal(t, newestFirst(7, 6, 5, 4, 3, 2, 1), ids(all.Items))
	assert.Empty(t, all.NextCursor)
	assert.Equal(t, created[6], all.Items[0])

	// Pages of 3 follow the cursor to the end.
	var got []string
	page := list("limit=3")
	for pages := 1; ; pages++ {
		got = append(got, ids(page.Items)...)
		if page.NextCursor == "" {
			assert.Equal(t, 3, pages)
			break
		}
		page = list("limit=3&cursor=" + url.QueryEscape(page.NextCursor))
	}
	assert.Equal(t, newestFirst(7, 6, 5, 4, 3, 2, 1), got)

	assert.Equal(t, newestFirst(5, 4, 3, 2), ids(list("from=2024-01-02&to=2024-01-05").Items))
	assert.Equal(t, newestFirst(7, 6), ids(list("from=2024-01-06").Items))
	assert.Equal(t, newestFirst(2, 1), ids(list("to=2024-01-02").Items))
	assert.Equal(t, newestFirst(6, 4, 2), ids(list("type=EXPENSE").Items))
	assert.Equal(t, newestFirst(7, 5), ids(list("category=sales&from=2024-01-04").Items))
	assert.Empty(t, list("category=none").Items)
	assert.Empty(t, list("from=2025-01-01").Items)

	// Filtered pages.
	page = list("type=INCOME&limit=2")
	assert.Equal(t, newestFirst(7, 5), ids(page.Items))
	require.NotEmpty(t, page.NextCursor)
	page = list("type=INCOME&limit=2&cursor=" + url.QueryEscape(page.NextCursor))
	assert.Equal(t, newestFirst(3, 1), ids(page.Items))

	// The limit is capped, not refused.
	assert.Len(t, list("limit=100000").Items, 7)

	for query, field := range map[string]string{
		"limit=0": "limit", "limit=-1": "limit", "limit=x": "limit", "from=2024-02-30": "from", "to=yesterday": "to",
		"from=2024-01-05&to=2024-01-01": "to", "type=income": "type", "sort=asc": "sort", "limit=1&limit=2": "limit",
	} {
		r := e.send(req{method: "GET", path: e.base() + "/transactions?" + query})
		require.Equal(t, http.StatusBadRequest, r.Status, "query %s: answer %s", query, r)
		assert.Equal(t, field, r.problem(t).Field, "query %s", query)
	}
}

func TestList_TamperedOrForeignCursorIs400BeforeAnyRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	for i := 0; i < 3; i++ {
		e.create(`{"type":"INCOME","amount":"1","category":"a","createdAt":"2024-05-0` + string(rune('1'+i)) + `T00:00:00Z"}`)
	}
	r := e.send(req{method: "GET", path: e.base() + "/transactions?limit=1"})
	require.Equal(t, http.StatusOK, r.Status)
	var page writer.ListPage
	require.NoError(t, json.Unmarshal(r.Body, &page))
	cur := page.NextCursor
	require.NotEmpty(t, cur)

	// Another tenant's listing issues its own cursor.
	other := newEnv(t, e.table)
	other.create(`{"type":"INCOME","amount":"1","category":"a"}`)
	other.create(`{"type":"INCOME","amount":"1","category":"a"}`)
	r = other.send(req{method: "GET", path: other.base() + "/transactions?limit=1"})
	var otherPage writer.ListPage
	require.NoError(t, json.Unmarshal(r.Body, &otherPage))
	require.NotEmpty(t, otherPage.NextCursor)

	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	payload, sig, _ := strings.Cut(cur, ".")
	before := e.dynamoCalls()
	for name, query := range map[string]string{
		"payload altered":          "limit=1&cursor=" + flip(cur, 3),
		"signature altered":        "limit=1&cursor=" + flip(cur, len(cur)-2),
		"signature dropped":        "limit=1&cursor=" + payload,
		"signature of another":     "limit=1&cursor=" + payload + "." + strings.SplitN(otherPage.NextCursor, ".", 2)[1],
		"another tenant's cursor":  "limit=1&cursor=" + otherPage.NextCursor,
		"other filters":            "limit=1&type=INCOME&cursor=" + cur,
		"garbage":                  "limit=1&cursor=%00%01garbage",
		"forged unsigned sort key": "limit=1&cursor=" + url.QueryEscape(`{"v":1,"sk":"2024-05-03#Z"}`) + "." + sig,
	} {
		r := e.send(req{method: "GET", path: e.base() + "/transactions?" + query})
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: answer %s", name, r)
		p := r.problem(t)
		assert.Equal(t, writer.ProblemInvalidCursor, p.Type, name)
		assert.Equal(t, "cursor", p.Field, name)
	}
	// Another branch of the same tenant.
	r = e.send(req{method: "GET", path: "/v1/tenants/" + e.tenant + "/branches/south/transactions?limit=1&cursor=" + cur})
	require.Equal(t, http.StatusBadRequest, r.Status, "answer %s", r)
	assert.Equal(t, before, e.dynamoCalls(), "no tampered cursor reached DynamoDB")

	// The genuine cursor works, with a different limit too.
	r = e.send(req{method: "GET", path: e.base() + "/transactions?limit=5&cursor=" + cur})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	require.NoError(t, json.Unmarshal(r.Body, &page))
	assert.Len(t, page.Items, 2)
}

func TestRoutes_UnknownPathAndWrongMethodAreProblems(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	r := e.send(req{method: "GET", path: "/v2/nothing"})
	require.Equal(t, http.StatusNotFound, r.Status)
	assert.Equal(t, writer.ProblemNotFound, r.problem(t).Type)
	r = e.send(req{method: "PUT", path: e.base() + "/transactions", body: `{}`})
	require.Equal(t, http.StatusMethodNotAllowed, r.Status)
	assert.Equal(t, writer.ProblemMethodNotAllowed, r.problem(t).Type)
	assert.Equal(t, "GET, POST", r.Header.Get("Allow"))
	r = e.send(req{method: "POST", path: e.base() + "/reports/YEARLY/2024", body: `{}`})
	require.Equal(t, http.StatusMethodNotAllowed, r.Status)
	assert.Equal(t, "GET", r.Header.Get("Allow"))
}
