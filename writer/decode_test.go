package writer

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
)

// FuzzDecodeCreate checks the POST body decoder on any input: it never
// panics, refuses with a complete problem, and whatever it accepts makes a
// transaction the stream consumers accept, with no key delimiter in any
// name, and decodes the same again from its canonical form. The seed corpus
// is testdata/fuzz/FuzzDecodeCreate (plain go test runs it); explore with
// go test ./writer -run '^$' -fuzz FuzzDecodeCreate -fuzztime 60s.
func FuzzDecodeCreate(f *testing.F) {
	f.Add([]byte(`{"type":"INCOME","amount":"12.50","category":"food"}`))
	f.Add([]byte(`{"type":"EXPENSE","amount":0.1,"category":"café ☕","costCenter":"ops","paymentMethod":"card","description":"x","createdAt":"2024-02-29T23:59:59.999999999-03:00"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, p := decodeCreate(body)
		if p != nil {
			checkProblem(t, p)
			return
		}
		checkAccepted(t, string(req.Type), req.Amount.String(), req.Category, req.CostCenter, req.PaymentMethod)
		if !req.CreatedAt.IsZero() && (req.CreatedAt.Before(minCreatedAt) || req.CreatedAt.After(maxCreatedAt)) {
			t.Fatalf("createdAt %s out of range", req.CreatedAt)
		}
		created := req.CreatedAt
		if created.IsZero() {
			created = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		}
		tx := Transaction{ID: "01JABCDEFGHJKMNPQRSTVWXYZ0", Tenant: "acme", Branch: "north", Type: string(req.Type),
			Amount: aggregates.FormatAmount(req.Amount), Category: req.Category, CostCenter: req.CostCenter,
			PaymentMethod: req.PaymentMethod, Description: req.Description, CreatedAt: created.Format(time.RFC3339Nano),
			UpdatedAt: created.Format(time.RFC3339Nano), Version: 1}
		if _, err := transactionItem(aggregates.TransactionKey("acme", "north", aggregates.DateOf(created), tx.ID), tx); err != nil {
			t.Fatalf("accepted %q, but the item is not a valid transaction: %v", body, err)
		}
		// The canonical form decodes to the same request.
		canon := map[string]any{"type": tx.Type, "amount": tx.Amount, "category": tx.Category}
		for k, v := range map[string]string{"costCenter": tx.CostCenter, "paymentMethod": tx.PaymentMethod, "description": tx.Description} {
			if v != "" {
				canon[k] = v
			}
		}
		if !req.CreatedAt.IsZero() {
			canon["createdAt"] = tx.CreatedAt
		}
		raw, _ := json.Marshal(canon)
		again, p := decodeCreate(raw)
		if p != nil {
			t.Fatalf("canonical form %s of accepted %q refused: %v", raw, body, p)
		}
		if !again.Amount.Equal(req.Amount) || again.Category != req.Category || again.Description != req.Description || !again.CreatedAt.Equal(req.CreatedAt) {
			t.Fatalf("canonical form %s decodes to %+v; want %+v", raw, again, req)
		}
	})
}

// FuzzDecodePatch checks the PATCH body decoder the same way.
func FuzzDecodePatch(f *testing.F) {
	f.Add([]byte(`{"amount":"1.5","costCenter":null}`))
	f.Add([]byte(`{"type":"INCOME","category":"x","paymentMethod":"pix","description":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, p := decodePatch(body)
		if p != nil {
			checkProblem(t, p)
			return
		}
		if req.empty() {
			t.Fatalf("accepted an empty patch %q", body)
		}
		typ, amount, category := "INCOME", "1", "c"
		if req.Type != nil {
			typ = string(*req.Type)
		}
		if req.Amount != nil {
			amount = req.Amount.String()
		}
		if req.Category != nil {
			category = *req.Category
		}
		checkAccepted(t, typ, amount, category, req.CostCenter.Value, req.PaymentMethod.Value)
	})
}

func checkProblem(t *testing.T, p *Problem) {
	t.Helper()
	if p.Status != http.StatusBadRequest || !strings.HasPrefix(p.Type, ProblemBase) || p.Title == "" || p.Detail == "" {
		t.Fatalf("incomplete problem %+v", p)
	}
	if _, err := json.Marshal(p); err != nil {
		t.Fatalf("problem does not marshal: %v", err)
	}
}

func checkAccepted(t *testing.T, typ, amount, category, costCenter, paymentMethod string) {
	t.Helper()
	if typ != "INCOME" && typ != "EXPENSE" {
		t.Fatalf("accepted type %q", typ)
	}
	d, err := aggregates.ParseAmount(amount)
	if err != nil || !d.IsPositive() || aggregates.CheckAmountRange(d) != nil {
		t.Fatalf("accepted amount %q", amount)
	}
	if aggregates.ValidateName(category) != nil {
		t.Fatalf("accepted category %q", category)
	}
	for _, n := range []string{costCenter, paymentMethod} {
		if strings.Contains(n, "#") || n != "" && aggregates.ValidateName(n) != nil {
			t.Fatalf("accepted name %q", n)
		}
	}
}

func TestDecodeCreate_DefaultsAndNulls(t *testing.T) {
	req, p := decodeCreate([]byte(`{"type":"INCOME","amount":"1","category":"a","costCenter":null,"description":null,"createdAt":null}`))
	require.Nil(t, p)
	assert.Empty(t, req.CostCenter)
	assert.True(t, req.CreatedAt.IsZero())
}

func TestParseIfMatch(t *testing.T) {
	for value, want := range map[string]int64{`"3"`: 3, `3`: 3, ` "12" `: 12} {
		r := httptest.NewRequest("PATCH", "/", nil)
		r.Header.Set("If-Match", value)
		v, present, wildcard, p := parseIfMatch(r)
		require.Nil(t, p, value)
		assert.True(t, present)
		assert.False(t, wildcard)
		assert.Equal(t, want, v, value)
	}
	for _, value := range []string{`W/"3"`, `"0"`, `-1`, `+3`, `"3", "4"`, `abc`, `""`, `"99999999999999999999"`} {
		r := httptest.NewRequest("PATCH", "/", nil)
		r.Header.Set("If-Match", value)
		_, _, _, p := parseIfMatch(r)
		assert.NotNil(t, p, value)
	}
	r := httptest.NewRequest("DELETE", "/", nil)
	r.Header.Set("If-Match", "*")
	_, present, wildcard, p := parseIfMatch(r)
	assert.Nil(t, p)
	assert.True(t, present && wildcard)
}

func TestParseIdempotencyKey(t *testing.T) {
	for value, want := range map[string]string{
		"8e03978e-40d5-43e8-bc93-6894a57f9324":   "8e03978e-40d5-43e8-bc93-6894a57f9324",
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`: "8e03978e-40d5-43e8-bc93-6894a57f9324",
		"01JABCDEFGHJKMNPQRSTVWXYZ0":             "01JABCDEFGHJKMNPQRSTVWXYZ0",
		"a+b/c=":                                 "a+b/c=",
	} {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set("Idempotency-Key", value)
		k, p := parseIdempotencyKey(r)
		require.Nil(t, p, value)
		assert.Equal(t, want, k)
	}
	for _, value := range []string{"", `""`, "a#b", "a b", "ключ", strings.Repeat("k", 129), "a\x00"} {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header["Idempotency-Key"] = []string{value}
		_, p := parseIdempotencyKey(r)
		assert.NotNil(t, p, "%q", value)
	}
}

func TestCursor_RoundTripAndBinding(t *testing.T) {
	c := cursorCodec{key: []byte("0123456789abcdef0123456789abcdef")}
	s := c.encode(cursor{Tenant: "acme", Branch: "north", Query: "type=INCOME", SK: "2024-01-01#X"})
	got, err := c.decode(s, "acme", "north", "type=INCOME")
	require.NoError(t, err)
	assert.Equal(t, "2024-01-01#X", got.SK)
	for name, try := range map[string]func() error{
		"other tenant": func() error { _, err := c.decode(s, "evil", "north", "type=INCOME"); return err },
		"other branch": func() error { _, err := c.decode(s, "acme", "south", "type=INCOME"); return err },
		"other query":  func() error { _, err := c.decode(s, "acme", "north", ""); return err },
		"other key": func() error {
			_, err := cursorCodec{key: []byte("another-key-0123456789abcdef01234")}.decode(s, "acme", "north", "type=INCOME")
			return err
		},
	} {
		assert.ErrorIs(t, try(), errBadCursor, name)
	}
}
