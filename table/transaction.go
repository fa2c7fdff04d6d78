package table

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file is the transaction item's stored layout. The writer puts it
// (EncodeTransaction) and reads it back (DecodeTransaction); the stream
// consumers and reconcile read it from stream images and scans
// (ParseTransaction, the domain's validation). Under
// aggregates.TransactionKey it holds
//
//	entityType                 TRANSACTION
//	id, tenantId, branchId     S
//	type                       S, INCOME or EXPENSE
//	amount                     N, exact, positive
//	category                   S
//	costCenter, paymentMethod  S, optional (absent when empty)
//	description                S, optional
//	createdAt, updatedAt       S, RFC 3339
//	version                    N, 1 on creation, +1 per change
//	businessDate               S, YYYY-MM-DD: the business date of createdAt in the branch's calendar
//	periods                    S, the report periods it counts in, "DAILY#2026-11-27 MONTHLY#2026-11 …"
//	currency                   S, optional: the ISO 4217 code of its branch's currency, e.g. BRL
//
// businessDate and periods are its stamp (aggregates/stamp.go), decided by
// the writer from createdAt, the branch's calendar and the tenant's period
// types in force when it writes the item; both absent (an item from before
// business calendars, or written by another path) counts in the UTC date's
// DAILY, MONTHLY and YEARLY periods. currency, like the stamp, is the
// writer's copy of its branch's currency when it writes the item (absent:
// the branch has none), so that a consumer knows the currency of an
// amount without reading the branch.

// Attribute names of the transaction item besides the keys, entityType and
// updatedAt. version is also the directory items' (writer).
const (
	AttrID            = "id"
	AttrTenantID      = "tenantId"
	AttrBranchID      = "branchId"
	AttrType          = "type"
	AttrAmount        = "amount"
	AttrCategory      = "category"
	AttrCostCenter    = "costCenter"
	AttrPaymentMethod = "paymentMethod"
	AttrDescription   = "description"
	AttrCreatedAt     = "createdAt"
	AttrVersion       = "version"
	// AttrCurrency is also the branch item's currency (writer).
	AttrCurrency = aggregates.AttrCurrency
)

// Transaction is a transaction item's fields as stored text. Its fields are
// those of writer.Transaction, in the same order, so the writer converts
// between the two.
type Transaction struct {
	ID, Tenant, Branch, Type, Amount, Category string
	CostCenter, PaymentMethod, Description     string
	CreatedAt, UpdatedAt                       string
	Version                                    int64
	// BusinessDate and Periods are the stamp's stored text; both "" for
	// a transaction stored without one.
	BusinessDate, Periods string
	// Currency is its branch's currency, "" for none.
	Currency string
}

// SetStamp sets t's stamp.
func (t *Transaction) SetStamp(s aggregates.Stamp) {
	t.BusinessDate, t.Periods = s.BusinessDate.String(), s.EncodePeriods()
}

// EncodeTransaction encodes t, stored under k, as the item the stream
// consumers accept (ParseTransaction), and checks that they do: nothing
// that uses it writes an item the consumers would quarantine. The error is
// then the *aggregates.InvalidError.
func EncodeTransaction(k aggregates.Key, t Transaction) (map[string]types.AttributeValue, error) {
	item := Key(k)
	item[AttrEntityType] = S(aggregates.EntityTransaction)
	item[AttrID] = S(t.ID)
	item[AttrTenantID] = S(t.Tenant)
	item[AttrBranchID] = S(t.Branch)
	item[AttrType] = S(t.Type)
	item[AttrAmount] = &types.AttributeValueMemberN{Value: t.Amount}
	item[AttrCategory] = S(t.Category)
	for name, v := range map[string]string{AttrCostCenter: t.CostCenter, AttrPaymentMethod: t.PaymentMethod, AttrDescription: t.Description} {
		if v != "" {
			item[name] = S(v)
		}
	}
	item[AttrCreatedAt] = S(t.CreatedAt)
	item[AttrVersion] = Int(t.Version)
	item[AttrUpdatedAt] = S(t.UpdatedAt)
	if t.BusinessDate != "" || t.Periods != "" {
		item[aggregates.AttrBusinessDate] = S(t.BusinessDate)
		item[aggregates.AttrPeriods] = S(t.Periods)
	}
	if t.Currency != "" {
		item[AttrCurrency] = S(t.Currency)
	}
	if _, err := ParseTransaction(item); err != nil {
		return nil, err
	}
	return item, nil
}

// DecodeTransaction reads a stored transaction item. It reads what is
// there even when the item is not a valid transaction (written by
// something other than the writer); the tenant and branch come from the
// partition key, an amount is the stored number's canonical text.
func DecodeTransaction(item map[string]types.AttributeValue) Transaction {
	var t Transaction
	t.ID, _ = String(item, AttrID)
	if pk, ok := String(item, AttrPK); ok {
		t.Tenant, t.Branch, _ = aggregates.ParseTransactionPK(pk)
	}
	t.Type, _ = String(item, AttrType)
	switch a := item[AttrAmount].(type) {
	case *types.AttributeValueMemberN:
		t.Amount = a.Value
		if d, err := aggregates.ParseAmount(a.Value); err == nil {
			t.Amount = aggregates.FormatAmount(d)
		}
	case *types.AttributeValueMemberS:
		t.Amount = a.Value
	}
	t.Category, _ = String(item, AttrCategory)
	t.CostCenter, _ = String(item, AttrCostCenter)
	t.PaymentMethod, _ = String(item, AttrPaymentMethod)
	t.Description, _ = String(item, AttrDescription)
	t.CreatedAt, _ = String(item, AttrCreatedAt)
	t.UpdatedAt, _ = String(item, AttrUpdatedAt)
	t.Version, _ = Int64(item, AttrVersion)
	t.BusinessDate, _ = String(item, aggregates.AttrBusinessDate)
	t.Periods, _ = String(item, aggregates.AttrPeriods)
	t.Currency, _ = String(item, AttrCurrency)
	return t
}

// ParseTransaction validates a transaction item (a stream image or a
// scanned item) as the stream consumers do: the domain's
// aggregates.ParseTransaction on its Image. The error is an
// *aggregates.InvalidError naming the reason and the field.
func ParseTransaction(item map[string]types.AttributeValue) (aggregates.Transaction, error) {
	return aggregates.ParseTransaction(Image(item))
}
