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

// If-Match as RFC 9110 §13.1.1 has it: "*", or a list of entity tags
// compared strongly (a weak tag, or a strong tag that is no version, never
// matches); a bare version is still taken; anything else is 400.
func TestParseIfMatch(t *testing.T) {
	cases := []struct {
		name   string
		values []string // field lines
		want   ifMatch
		bad    bool
	}{
		{name: "absent"},
		{name: "one version", values: []string{`"3"`}, want: ifMatch{present: true, versions: []int64{3}}},
		{name: "bare version", values: []string{`3`}, want: ifMatch{present: true, versions: []int64{3}}},
		{name: "spaces", values: []string{` "12" `}, want: ifMatch{present: true, versions: []int64{12}}},
		{name: "star", values: []string{`*`}, want: ifMatch{present: true, any: true}},
		{name: "list", values: []string{`"2", "3"`}, want: ifMatch{present: true, versions: []int64{2, 3}}},
		{name: "list without spaces", values: []string{`"2","3"`}, want: ifMatch{present: true, versions: []int64{2, 3}}},
		{name: "list over field lines", values: []string{`"2"`, `"3"`}, want: ifMatch{present: true, versions: []int64{2, 3}}},
		{name: "empty list elements", values: []string{`, "2",, "3" ,`}, want: ifMatch{present: true, versions: []int64{2, 3}}},
		{name: "weak never matches", values: []string{`W/"3"`}, want: ifMatch{present: true}},
		{name: "weak among strong", values: []string{`W/"2", "3"`}, want: ifMatch{present: true, versions: []int64{3}}},
		{name: "strong tag that is no version", values: []string{`"abc"`}, want: ifMatch{present: true}},
		{name: "version 0", values: []string{`"0"`}, want: ifMatch{present: true}},
		{name: "empty tag", values: []string{`""`}, want: ifMatch{present: true}},
		{name: "too large", values: []string{`"99999999999999999999"`}, want: ifMatch{present: true}},
		{name: "signed", values: []string{`"+3"`}, want: ifMatch{present: true}},
		{name: "comma inside a tag", values: []string{`"a,b", "4"`}, want: ifMatch{present: true, versions: []int64{4}}},
		{name: "empty", values: []string{``}, bad: true},
		{name: "bare word", values: []string{`abc`}, bad: true},
		{name: "bare negative", values: []string{`-1`}, bad: true},
		{name: "bare signed", values: []string{`+3`}, bad: true},
		{name: "unclosed", values: []string{`"3`}, bad: true},
		{name: "weak without a tag", values: []string{`W/3`}, bad: true},
		{name: "star in a list", values: []string{`*, "3"`}, bad: true},
		{name: "tags not separated", values: []string{`"2""3"`}, bad: true},
		{name: "space inside a tag", values: []string{`"2 3"`}, bad: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("PATCH", "/", nil)
			for _, v := range tc.values {
				r.Header.Add("If-Match", v)
			}
			got, p := parseIfMatch(r)
			if tc.bad {
				require.NotNil(t, p, "%q parsed as %+v", tc.values, got)
				assert.Equal(t, "If-Match", p.Field)
				assert.Equal(t, http.StatusBadRequest, p.Status)
				return
			}
			require.Nil(t, p, "%q", tc.values)
			assert.Equal(t, tc.want, got)
		})
	}
}

// The evaluation: absent and "*" condition on any version; a list matches
// when any of its versions is current; otherwise 412 naming the current one.
func TestIfMatchVersionFor(t *testing.T) {
	s := &Server{metrics: NewMetrics(nil)}
	cases := []struct {
		name     string
		m        ifMatch
		current  int64
		expected int64
		mismatch bool
	}{
		{name: "absent", m: ifMatch{}, current: 4, expected: 0},
		{name: "star", m: ifMatch{present: true, any: true}, current: 4, expected: 0},
		{name: "the version", m: ifMatch{present: true, versions: []int64{4}}, current: 4, expected: 4},
		{name: "one of a list", m: ifMatch{present: true, versions: []int64{2, 4}}, current: 4, expected: 4},
		{name: "stale", m: ifMatch{present: true, versions: []int64{3}}, current: 4, mismatch: true},
		{name: "none of a list", m: ifMatch{present: true, versions: []int64{2, 3}}, current: 4, mismatch: true},
		{name: "only weak tags", m: ifMatch{present: true}, current: 4, mismatch: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, p := s.versionFor(tc.m, tc.current)
			if tc.mismatch {
				require.NotNil(t, p)
				assert.Equal(t, http.StatusPreconditionFailed, p.Status)
				assert.Equal(t, tc.current, *p.CurrentVersion)
				return
			}
			require.Nil(t, p)
			assert.Equal(t, tc.expected, got)
		})
	}
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
