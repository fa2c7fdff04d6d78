package aggregates

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// Type is a transaction's direction.
type Type string

// The two transaction types, case-sensitive as stored.
const (
	Income  Type = "INCOME"
	Expense Type = "EXPENSE"
)

// Transaction is a valid transaction as stored in the table. Only values that
// passed ParseTransaction are ever aggregated.
type Transaction struct {
	Tenant, Branch string
	SK             string // {YYYY-MM-DD}#{id}
	ID             string
	Type           Type
	Amount         decimal.Decimal
	Category       string
	CostCenter     string // "" when absent
	PaymentMethod  string // "" when absent
	CreatedAt      time.Time
	Date           Date // UTC date of CreatedAt, equal to the SK's date
	// Stamp is the transaction's periods (stamp.go): as stored, or the
	// LegacyStamp of Date when it was stored without one (Stamped false).
	Stamp   Stamp
	Stamped bool
	// Currency is the ISO 4217 code of the amount (currency.go), stamped
	// by the writer from its branch's currency; "" for a transaction of a
	// branch without one.
	Currency string
}

// Attr is one attribute of a stored item as the domain sees it: its DynamoDB
// type tag (S, N, BOOL, M, L, B, SS, NS, BS, NULL) and, for S and N, its
// text exactly as stored.
type Attr struct {
	Type  string
	Value string
}

// Image is an item image: attribute name to attribute. Attributes of
// non-scalar types carry only their type tag.
type Image map[string]Attr

// Reason says why an image is not a valid transaction. The values are
// stable: they are metric labels and are stored with quarantined records.
type Reason string

// Every way an image can fail to be a valid transaction.
const (
	ReasonShape             Reason = "shape"             // the record or image is malformed
	ReasonKey               Reason = "key"               // PK is not TENANT#…#BRANCH#…#TRANSACTION
	ReasonEntityType        Reason = "entity_type"       // entityType is not "TRANSACTION"
	ReasonSortKey           Reason = "sort_key"          // SK does not start with a real YYYY-MM-DD#
	ReasonType              Reason = "type"              // type is not exactly INCOME or EXPENSE
	ReasonAmountMissing     Reason = "amount_missing"    // no amount attribute
	ReasonAmountNotNumber   Reason = "amount_not_number" // amount is not of type N (e.g. a numeric S)
	ReasonAmountInvalid     Reason = "amount_invalid"    // amount is N but not a DynamoDB number
	ReasonAmountNotPositive Reason = "amount_not_positive"
	ReasonAmountRange       Reason = "amount_out_of_range" // more than 22 integer or 8 fraction digits
	ReasonCategory          Reason = "category"            // category missing, empty or not a string
	ReasonCostCenter        Reason = "cost_center"         // costCenter present but empty or not a string
	ReasonPaymentMethod     Reason = "payment_method"      // paymentMethod present but empty or not a string
	ReasonNameTooLong       Reason = "name_too_long"       // a breakdown name longer than MaxNameLength characters
	ReasonCreatedAt         Reason = "created_at"          // createdAt missing or not RFC 3339
	ReasonDateMismatch      Reason = "date_mismatch"       // createdAt's UTC date differs from the SK date
	ReasonPeriods           Reason = "periods"             // businessDate or periods present but not a valid stamp (stamp.go), or one without the other
	ReasonCurrency          Reason = "currency"            // currency present but not a string holding a currency code (currency.go)
)

// InvalidError reports why an image is not a valid transaction.
type InvalidError struct {
	Reason Reason
	Field  string // the offending attribute, "" when not one attribute
	Detail string
}

func (e *InvalidError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("invalid transaction (%s): %s", e.Reason, e.Detail)
	}
	return fmt.Sprintf("invalid transaction (%s): %s: %s", e.Reason, e.Field, e.Detail)
}

func invalid(r Reason, field, format string, args ...any) *InvalidError {
	return &InvalidError{Reason: r, Field: field, Detail: fmt.Sprintf(format, args...)}
}

// IsTransactionKey reports whether pk has the transaction partition form. It
// is how a consumer decides, from the keys alone, whether a stream record is
// about a transaction before it trusts the images.
func IsTransactionKey(pk string) bool {
	_, _, ok := ParseTransactionPK(pk)
	return ok
}

// ErrDeleted is ParseTransaction's answer for a deleted transaction's
// tombstone (an image of a transaction partition holding AttrDeletedAt):
// the transaction is absent, like an image that is not there. It is not
// an invalid transaction: a tombstone contributes nothing and is never
// quarantined (docs/design.md, "Transaction"; docs/exactly-once.md, "The
// design: counted changes").
var ErrDeleted = errors.New("a deleted transaction (tombstone): absent")

// ParseTransaction validates a stored image against the rules of docs/design.md ("Transaction") and
// returns the transaction. The error is ErrDeleted for a tombstone (absent,
// not invalid), else an *InvalidError naming the first rule broken.
func ParseTransaction(img Image) (Transaction, error) {
	pk, ok := img.str("PK")
	if !ok {
		return Transaction{}, invalid(ReasonKey, "PK", "missing or not a string")
	}
	tenant, branch, ok := ParseTransactionPK(pk)
	if !ok {
		return Transaction{}, invalid(ReasonKey, "PK", "%q is not TENANT#{t}#BRANCH#{b}#TRANSACTION", pk)
	}
	if _, deleted := img[AttrDeletedAt]; deleted {
		return Transaction{}, ErrDeleted
	}
	if et, _ := img.str("entityType"); et != EntityTransaction {
		return Transaction{}, invalid(ReasonEntityType, "entityType", "%q, want %q", img["entityType"].Value, EntityTransaction)
	}
	sk, ok := img.str("SK")
	if !ok || len(sk) < 11 || sk[10] != '#' {
		return Transaction{}, invalid(ReasonSortKey, "SK", "%q does not start with YYYY-MM-DD#", sk)
	}
	date, err := ParseDate(sk[:10])
	if err != nil {
		return Transaction{}, invalid(ReasonSortKey, "SK", "%q: %v", sk, err)
	}
	tx := Transaction{Tenant: tenant, Branch: branch, SK: sk, ID: sk[11:], Date: date}
	if id, ok := img.str("id"); ok {
		tx.ID = id
	}

	typ, _ := img.str("type")
	switch Type(typ) {
	case Income, Expense:
		tx.Type = Type(typ)
	default:
		return Transaction{}, invalid(ReasonType, "type", "%q, want INCOME or EXPENSE", img["type"].Value)
	}

	amount, present := img["amount"]
	switch {
	case !present:
		return Transaction{}, invalid(ReasonAmountMissing, "amount", "missing")
	case amount.Type != "N":
		return Transaction{}, invalid(ReasonAmountNotNumber, "amount", "type %s, want N", amount.Type)
	}
	tx.Amount, err = ParseAmount(amount.Value)
	if err != nil {
		return Transaction{}, invalid(ReasonAmountInvalid, "amount", "%v", err)
	}
	if !tx.Amount.IsPositive() {
		return Transaction{}, invalid(ReasonAmountNotPositive, "amount", "%s is not greater than 0", amount.Value)
	}
	if err := CheckAmountRange(tx.Amount); err != nil {
		return Transaction{}, invalid(ReasonAmountRange, "amount", "%s: %v", amount.Value, err)
	}

	if tx.Category, ok = img.str("category"); !ok || tx.Category == "" {
		return Transaction{}, invalid(ReasonCategory, "category", "missing, empty or not a string")
	}
	if tx.CostCenter, err = optional(img, "costCenter", ReasonCostCenter); err != nil {
		return Transaction{}, err
	}
	if tx.PaymentMethod, err = optional(img, "paymentMethod", ReasonPaymentMethod); err != nil {
		return Transaction{}, err
	}

	for _, f := range []struct{ field, name string }{{"category", tx.Category}, {"costCenter", tx.CostCenter}, {"paymentMethod", tx.PaymentMethod}} {
		if n := utf8.RuneCountInString(f.name); n > MaxNameLength {
			return Transaction{}, invalid(ReasonNameTooLong, f.field, "%d characters, more than %d", n, MaxNameLength)
		}
	}

	created, ok := img.str("createdAt")
	if !ok {
		return Transaction{}, invalid(ReasonCreatedAt, "createdAt", "missing or not a string")
	}
	tx.CreatedAt, err = time.Parse(time.RFC3339Nano, created)
	if err != nil {
		return Transaction{}, invalid(ReasonCreatedAt, "createdAt", "%q is not RFC 3339", created)
	}
	tx.CreatedAt = tx.CreatedAt.UTC()
	if d := DateOf(tx.CreatedAt); d != date {
		return Transaction{}, invalid(ReasonDateMismatch, "createdAt", "UTC date %s differs from the sort key date %s", d, date)
	}
	bd, hasDate := img[AttrBusinessDate]
	ps, hasPeriods := img[AttrPeriods]
	switch {
	case !hasDate && !hasPeriods:
		tx.Stamp = LegacyStamp(date)
	case !hasDate || !hasPeriods || bd.Type != "S" || ps.Type != "S":
		return Transaction{}, invalid(ReasonPeriods, AttrPeriods, "businessDate and periods must both be strings, or both be absent")
	default:
		if tx.Stamp, err = ParseStamp(bd.Value, ps.Value); err != nil {
			return Transaction{}, invalid(ReasonPeriods, AttrPeriods, "%v", err)
		}
		// Business date D's instants have UTC dates D−1 to D+2 in every
		// calendar (the bound a listing by business date reads).
		if b := tx.Stamp.BusinessDate; b.Before(date.AddDays(-StampDaysBefore)) || date.AddDays(StampDaysAfter).Before(b) {
			return Transaction{}, invalid(ReasonPeriods, AttrBusinessDate, "%s: no calendar gives a transaction of UTC date %s a business date more than %d days before or %d day after it", b, date, StampDaysBefore, StampDaysAfter)
		}
		tx.Stamped = true
	}
	if c, present := img[AttrCurrency]; present {
		if c.Type != "S" {
			return Transaction{}, invalid(ReasonCurrency, AttrCurrency, "type %s, want S", c.Type)
		}
		if err := ValidateCurrency(c.Value); err != nil {
			return Transaction{}, invalid(ReasonCurrency, AttrCurrency, "%v", err)
		}
		tx.Currency = c.Value
	}
	return tx, nil
}

// A stamp's business date is from StampDaysBefore days before its
// transaction's UTC date to StampDaysAfter days after it: business day D
// starts when the local clock (UTC−16 to UTC+16 at most, local mean times
// included) first reads D at or after its start, and ends when the next
// date the clock reads starts, so its instants have UTC dates D−1 to D+2.
const (
	StampDaysBefore = 2
	StampDaysAfter  = 1
)

// The attributes of a transaction's stamp (stamp.go), named here because
// validation reads them; table/transaction.go has the item's layout.
const (
	AttrBusinessDate = "businessDate"
	AttrPeriods      = "periods"
	// AttrCurrency is the transaction's currency, its branch's (currency.go).
	AttrCurrency = "currency"
	// AttrDeletedAt marks a deleted transaction's tombstone (ErrDeleted):
	// the writer's DELETE keeps the key and its change count and removes
	// the fields.
	AttrDeletedAt = "deletedAt"
)

func optional(img Image, name string, r Reason) (string, error) {
	a, present := img[name]
	if !present {
		return "", nil
	}
	if a.Type != "S" || a.Value == "" {
		return "", invalid(r, name, "present but empty or not a string")
	}
	return a.Value, nil
}

func (img Image) str(name string) (string, bool) {
	a, ok := img[name]
	if !ok || a.Type != "S" {
		return "", false
	}
	return a.Value, true
}

// Breakdown returns the transaction's entry name in dimension d, "" when the
// transaction has none there (no entry is added then).
func (t Transaction) Breakdown(d Dimension) string {
	switch d {
	case ByCategory:
		return t.Category
	case ByCostCenter:
		return t.CostCenter
	case ByPaymentMethod:
		return t.PaymentMethod
	}
	return ""
}

// ReportKeys returns the keys of the reports t contributes to: one per
// period of its stamp.
func (t Transaction) ReportKeys() []ReportKey {
	keys := make([]ReportKey, len(t.Stamp.Periods))
	for i, p := range t.Stamp.Periods {
		keys[i] = ReportKey{Tenant: t.Tenant, Branch: t.Branch, Period: p}
	}
	return keys
}

// Key returns t's item key.
func (t Transaction) Key() Key { return Key{PK: TransactionPK(t.Tenant, t.Branch), SK: t.SK} }
