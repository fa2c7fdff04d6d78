package aggregates

import (
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func TestParseAmount_IsExactAndBoundedTo38Digits(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: "0.1", want: "0.1"},
		{in: "1.10", want: "1.1"},
		{in: "1E+2", want: "100"},
		{in: "12345678901234567890123456789012345678", want: "12345678901234567890123456789012345678"},
		{in: "0.00000000000000000000000000000000000001", want: "0.00000000000000000000000000000000000001"},
		{in: "123456789012345678901234567890123456789", wantErr: "39 significant digits"},
		{in: "1000000000000000000000000000000000000000000", want: "1000000000000000000000000000000000000000000"},
		{in: "abc", wantErr: "not a number"},
		{in: " 1", wantErr: "not a number"},
		{in: "", wantErr: "not a number"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAmount(tt.in)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, FormatAmount(got))
		})
	}
}

func TestMoney_TenTimesOneTenthIsExactlyOne(t *testing.T) {
	f := NewFold()
	for i := 0; i < 10; i++ {
		tx := validTx(t, "txn"+string(rune('a'+i)), "INCOME", "0.1", "food")
		f.Add(tx, +1)
	}
	k := ReportKey{Tenant: "t1", Branch: "b1", Period: Period{Type: Monthly, Value: "2024-02"}}
	r := f.Report(k)
	require.NotNil(t, r)
	assert.True(t, r.Income.Equal(dec("1")), "got %s; want 1", r.Income)
	assert.Equal(t, "1", FormatAmount(r.Income))
	assert.Equal(t, int64(10), r.Count)
}

func TestParseDate_RejectsDatesThatDoNotExist(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{"2024-02-29", true},
		{"2023-02-29", false},
		{"2024-13-01", false},
		{"2024-1-01", false},
		{"20240101", false},
		{"2024-12-31", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			d, err := ParseDate(tt.in)
			if !tt.ok {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.in, d.String())
		})
	}
}

func TestDatePeriods_UseTheUTCDate(t *testing.T) {
	tests := []struct {
		createdAt string
		want      [3]string
	}{
		{"2024-02-29T23:59:59Z", [3]string{"DAILY#2024-02-29", "MONTHLY#2024-02", "YEARLY#2024"}},
		{"2024-12-31T23:30:00-01:00", [3]string{"DAILY#2025-01-01", "MONTHLY#2025-01", "YEARLY#2025"}},
		{"2025-01-01T00:30:00+01:00", [3]string{"DAILY#2024-12-31", "MONTHLY#2024-12", "YEARLY#2024"}},
		{"2024-03-31T10:00:00.123456789Z", [3]string{"DAILY#2024-03-31", "MONTHLY#2024-03", "YEARLY#2024"}},
	}
	for _, tt := range tests {
		t.Run(tt.createdAt, func(t *testing.T) {
			ts, err := time.Parse(time.RFC3339Nano, tt.createdAt)
			require.NoError(t, err)
			ps := LegacyStamp(DateOf(ts)).Periods
			for i := range ps {
				assert.Equal(t, tt.want[i], ps[i].String())
			}
		})
	}
}

func TestParsePeriod(t *testing.T) {
	tests := []struct {
		typ   PeriodType
		value string
		ok    bool
	}{
		{Daily, "2024-02-29", true},
		{Daily, "2023-02-29", false},
		{Monthly, "2024-12", true},
		{Monthly, "2024-13", false},
		{Monthly, "2024-1", false},
		{Yearly, "2024", true},
		{Yearly, "24", false},
		{"WEEKLY", "2024-01", false},
	}
	for _, tt := range tests {
		t.Run(string(tt.typ)+"/"+tt.value, func(t *testing.T) {
			_, err := ParsePeriod(tt.typ, tt.value)
			assert.Equal(t, tt.ok, err == nil, "err=%v", err)
		})
	}
}

func TestKeys_RoundTrip(t *testing.T) {
	tenant, branch, ok := ParseTransactionPK(TransactionPK("acme", "north"))
	require.True(t, ok)
	assert.Equal(t, "acme", tenant)
	assert.Equal(t, "north", branch)

	for _, pk := range []string{"TENANT#a#BRANCH#b#REPORTING", "TENANT##BRANCH#b#TRANSACTION", "TENANT#a#BRANCH##TRANSACTION", "TENANT#a#TRANSACTION", "X#a#BRANCH#b#TRANSACTION"} {
		_, _, ok := ParseTransactionPK(pk)
		assert.False(t, ok, pk)
	}

	rk := ReportKey{Tenant: "acme", Branch: "north", Period: Period{Type: Monthly, Value: "2024-02"}}
	assert.Equal(t, Key{PK: "TENANT#acme#BRANCH#north#REPORTING", SK: "MONTHLY#2024-02"}, rk.Key())
	back, err := ParseReportKey(rk.Key())
	require.NoError(t, err)
	assert.Equal(t, rk, back)
	_, err = ParseReportKey(Key{PK: "TENANT#acme#BRANCH#north#REPORTING", SK: "WEEKLY#2024-02"})
	assert.Error(t, err)

	assert.Equal(t, Key{PK: "TENANT#acme#BRANCH#north#TRANSACTION", SK: "2024-02-29#01HX"},
		TransactionKey("acme", "north", Date{2024, time.February, 29}, "01HX"))
	assert.Equal(t, Key{PK: "TENANT#acme", SK: "METADATA"}, TenantKey("acme"))
	assert.Equal(t, Key{PK: "TENANT#acme#BRANCH", SK: "north"}, BranchKey("acme", "north"))
	assert.Equal(t, Key{PK: "TENANT#acme#ACCOUNT", SK: "u1"}, AccountKey("acme", "u1"))
	assert.Equal(t, Key{PK: "SETTINGS#APP", SK: "FLAGS#V1"}, FlagsKey())
}

// image returns a valid transaction image of tenant t1, branch b1 on
// 2024-02-29, with overrides applied (an Attr with Type "" deletes).
func image(overrides map[string]Attr) Image {
	img := Image{
		"PK":            {"S", "TENANT#t1#BRANCH#b1#TRANSACTION"},
		"SK":            {"S", "2024-02-29#txn1"},
		"entityType":    {"S", "TRANSACTION"},
		"id":            {"S", "txn1"},
		"type":          {"S", "INCOME"},
		"amount":        {"N", "10.50"},
		"category":      {"S", "food"},
		"costCenter":    {"S", "cc 1/a#b"},
		"paymentMethod": {"S", "card"},
		"createdAt":     {"S", "2024-02-29T12:00:00.5Z"},
		"version":       {"N", "1"},
	}
	for k, v := range overrides {
		if v.Type == "" {
			delete(img, k)
			continue
		}
		img[k] = v
	}
	return img
}

func TestParseTransaction_ReasonForEveryInvalidKind(t *testing.T) {
	tests := []struct {
		name      string
		overrides map[string]Attr
		want      Reason
		field     string
	}{
		{"valid", nil, "", ""},
		{"optional breakdowns absent", map[string]Attr{"costCenter": {}, "paymentMethod": {}}, "", ""},
		{"non-ASCII category", map[string]Attr{"category": {"S", "café: ☕ #1"}}, "", ""},
		{"pk not a transaction", map[string]Attr{"PK": {"S", "TENANT#t1#BRANCH#b1#REPORTING"}}, ReasonKey, "PK"},
		{"pk not a string", map[string]Attr{"PK": {"N", "1"}}, ReasonKey, "PK"},
		{"entity type missing", map[string]Attr{"entityType": {}}, ReasonEntityType, "entityType"},
		{"entity type other", map[string]Attr{"entityType": {"S", "REPORT"}}, ReasonEntityType, "entityType"},
		{"sk without date", map[string]Attr{"SK": {"S", "txn1"}}, ReasonSortKey, "SK"},
		{"sk impossible date", map[string]Attr{"SK": {"S", "2023-02-29#txn1"}}, ReasonSortKey, "SK"},
		{"sk date without #", map[string]Attr{"SK": {"S", "2024-02-29txn1"}}, ReasonSortKey, "SK"},
		{"type lower case", map[string]Attr{"type": {"S", "income"}}, ReasonType, "type"},
		{"type unknown", map[string]Attr{"type": {"S", "REFUND"}}, ReasonType, "type"},
		{"type missing", map[string]Attr{"type": {}}, ReasonType, "type"},
		{"amount missing", map[string]Attr{"amount": {}}, ReasonAmountMissing, "amount"},
		{"amount as string", map[string]Attr{"amount": {"S", "10.50"}}, ReasonAmountNotNumber, "amount"},
		{"amount garbage", map[string]Attr{"amount": {"N", "ten"}}, ReasonAmountInvalid, "amount"},
		{"amount zero", map[string]Attr{"amount": {"N", "0"}}, ReasonAmountNotPositive, "amount"},
		{"amount negative", map[string]Attr{"amount": {"N", "-1"}}, ReasonAmountNotPositive, "amount"},
		{"amount of 38 digits", map[string]Attr{"amount": {"N", "99999999999999999999999999999999999999"}}, ReasonAmountRange, "amount"},
		{"amount of 9 decimals", map[string]Attr{"amount": {"N", "1.000000001"}}, ReasonAmountRange, "amount"},
		{"amount at the range limits", map[string]Attr{"amount": {"N", "9999999999999999999999.99999999"}}, "", ""},
		{"trailing zeros do not count", map[string]Attr{"amount": {"N", "1.100000000000"}}, "", ""},
		{"category missing", map[string]Attr{"category": {}}, ReasonCategory, "category"},
		{"category empty", map[string]Attr{"category": {"S", ""}}, ReasonCategory, "category"},
		{"category number", map[string]Attr{"category": {"N", "3"}}, ReasonCategory, "category"},
		{"cost centre empty", map[string]Attr{"costCenter": {"S", ""}}, ReasonCostCenter, "costCenter"},
		{"cost centre map", map[string]Attr{"costCenter": {"M", ""}}, ReasonCostCenter, "costCenter"},
		{"payment method empty", map[string]Attr{"paymentMethod": {"S", ""}}, ReasonPaymentMethod, "paymentMethod"},
		{"category of 64 four-byte characters", map[string]Attr{"category": {"S", strings.Repeat("𝄞", 64)}}, "", ""},
		{"category of 65 characters", map[string]Attr{"category": {"S", strings.Repeat("c", 65)}}, ReasonNameTooLong, "category"},
		{"cost centre of 65 characters", map[string]Attr{"costCenter": {"S", strings.Repeat("é", 65)}}, ReasonNameTooLong, "costCenter"},
		{"payment method of 65 characters", map[string]Attr{"paymentMethod": {"S", strings.Repeat("p", 65)}}, ReasonNameTooLong, "paymentMethod"},
		{"created at missing", map[string]Attr{"createdAt": {}}, ReasonCreatedAt, "createdAt"},
		{"created at not rfc3339", map[string]Attr{"createdAt": {"S", "2024-02-29 12:00:00"}}, ReasonCreatedAt, "createdAt"},
		{"created at other day", map[string]Attr{"createdAt": {"S", "2024-02-28T12:00:00Z"}}, ReasonDateMismatch, "createdAt"},
		{"created at other UTC day", map[string]Attr{"createdAt": {"S", "2024-02-29T23:30:00-02:00"}}, ReasonDateMismatch, "createdAt"},
		{"currency", map[string]Attr{"currency": {"S", "BRL"}}, "", ""},
		{"currency with more digits than it has", map[string]Attr{"currency": {"S", "JPY"}, "amount": {"N", "10.5"}}, "", ""}, // the writer's rule, not the consumers'
		{"currency lower case", map[string]Attr{"currency": {"S", "brl"}}, ReasonCurrency, "currency"},
		{"currency unknown", map[string]Attr{"currency": {"S", "ZZZ"}}, ReasonCurrency, "currency"},
		{"currency empty", map[string]Attr{"currency": {"S", ""}}, ReasonCurrency, "currency"},
		{"currency not a string", map[string]Attr{"currency": {"N", "986"}}, ReasonCurrency, "currency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx, err := ParseTransaction(image(tt.overrides))
			if tt.want == "" {
				require.NoError(t, err)
				assert.Equal(t, "t1", tx.Tenant)
				assert.Equal(t, "b1", tx.Branch)
				assert.Equal(t, "2024-02-29", tx.Date.String())
				return
			}
			var inv *InvalidError
			require.ErrorAs(t, err, &inv)
			assert.Equal(t, tt.want, inv.Reason)
			assert.Equal(t, tt.field, inv.Field)
			assert.NotEmpty(t, inv.Error())
		})
	}
}

func validTx(t *testing.T, id, typ, amount, category string) Transaction {
	t.Helper()
	tx, err := ParseTransaction(image(map[string]Attr{
		"SK": {"S", "2024-02-29#" + id}, "id": {"S", id},
		"type": {"S", typ}, "amount": {"N", amount}, "category": {"S", category},
	}))
	require.NoError(t, err)
	return tx
}

func monthly(f *Fold) *Report {
	return f.Report(ReportKey{Tenant: "t1", Branch: "b1", Period: Period{Type: Monthly, Value: "2024-02"}})
}

func TestFold_ChangeDeltas(t *testing.T) {
	t.Run("type change moves the amount from income to expense", func(t *testing.T) {
		f := NewFold()
		old := validTx(t, "x", "INCOME", "10", "food")
		f.Add(old, +1)
		upd := old
		upd.Type = Expense
		f.AddChange(&old, &upd)
		r := monthly(f)
		r.Prune()
		assert.Equal(t, "0", r.Income.String())
		assert.Equal(t, "10", r.Expense.String())
		assert.Equal(t, int64(1), r.Count)
		assert.Equal(t, "10", r.Breakdowns[ByCategory]["food"].Expense.String())
	})
	t.Run("category rename moves the entry", func(t *testing.T) {
		f := NewFold()
		old := validTx(t, "x", "EXPENSE", "2.5", "food")
		f.Add(old, +1)
		upd := old
		upd.Category = "travel"
		f.AddChange(&old, &upd)
		r := monthly(f)
		r.Prune()
		_, stillFood := r.Breakdowns[ByCategory]["food"]
		assert.False(t, stillFood)
		assert.Equal(t, Totals{Expense: dec("2.5"), Count: 1, Income: decimal.Zero}.String(), r.Breakdowns[ByCategory]["travel"].String())
	})
	t.Run("delete after modify leaves nothing", func(t *testing.T) {
		f := NewFold()
		a := validTx(t, "x", "EXPENSE", "2.5", "food")
		b := a
		b.Amount = dec("7.25")
		b.PaymentMethod = ""
		f.AddChange(nil, &a)
		f.AddChange(&a, &b)
		f.AddChange(&b, nil)
		assert.Empty(t, f.Keys(), "a fold that cancels out touches no report")
	})
	t.Run("modify to invalid subtracts the old image", func(t *testing.T) {
		f := NewFold()
		a := validTx(t, "x", "INCOME", "3", "food")
		f.AddChange(nil, &a)
		f.AddChange(&a, nil)
		assert.Empty(t, f.Keys())
	})
	t.Run("missing optional breakdowns add no entry", func(t *testing.T) {
		f := NewFold()
		a := validTx(t, "x", "INCOME", "3", "food")
		a.CostCenter, a.PaymentMethod = "", ""
		f.Add(a, +1)
		r := monthly(f)
		assert.Nil(t, r.Breakdowns[ByCostCenter])
		assert.Nil(t, r.Breakdowns[ByPaymentMethod])
		assert.Len(t, f.Keys(), 3)
	})
}

func TestReportDiff_TreatsZeroEntriesAsAbsent(t *testing.T) {
	a := &Report{}
	a.Add(Totals{Income: dec("1.10"), Count: 1}, [3]string{"food", "", ""})
	a.Add(Totals{Income: dec("-1.1"), Count: -1}, [3]string{"food", "", ""})
	b := &Report{}
	assert.True(t, a.Equal(b), strings.Join(a.Diff(b), "\n"))
	b.Add(Totals{Expense: dec("2"), Count: 1}, [3]string{"rent", "", ""})
	assert.Equal(t, []string{
		`totals: got income=0 expense=0 count=0; want income=0 expense=2 count=1`,
		`byCategory["rent"]: got income=0 expense=0 count=0; want income=0 expense=2 count=1`,
	}, a.Diff(b))
}
