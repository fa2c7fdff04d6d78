package table

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

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
//	changes                    N, the stream records the item has produced: 1 on creation, +1 per write
//	sig                        B, 16 bytes: Sig of the item as written (its key, what the fold reads, deletedAt, changes)
//	deletedAt                  S, RFC 3339: only on a tombstone (a deleted transaction)
//	probe                      S, only on an item a rebase probed (exactly-once.md); every write removes it
//
// businessDate and periods are its stamp (aggregates/stamp.go), decided by
// the writer from createdAt, the branch's calendar and the tenant's period
// types in force when it writes the item; both absent (an item from before
// business calendars, or written by another path) counts in the UTC date's
// DAILY, MONTHLY and YEARLY periods. currency, like the stamp, is the
// writer's copy of its branch's currency when it writes the item (absent:
// the branch has none), so that a consumer knows the currency of an
// amount without reading the branch.

// changes and sig are the counted changes of docs/exactly-once.md ("The
// design: counted changes", W): every write of the writer, of ledgerctl
// rebucket and of a rebase raises changes by one and stores the sig of
// what it writes (Count), so that the k-th stream record of an item has
// NewImage.changes = k and an image whose sig does not match was written
// by someone else. A write that raises changes always changes the item,
// so it always makes exactly one stream record.
//
// A tombstone (the writer's DELETE) keeps the key, entityType, id,
// tenantId, branchId, createdAt, updatedAt, version, changes and sig,
// and holds deletedAt instead of the fields (TombstoneRemoves): ids are
// never reused, and the count of a deleted key stays readable until
// ledgerctl compact retires it. ParseTransaction says a tombstone is
// absent (aggregates.ErrDeleted), never invalid.

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
	AttrCurrency  = aggregates.AttrCurrency
	AttrChanges   = "changes"
	AttrSig       = "sig"
	AttrDeletedAt = aggregates.AttrDeletedAt
	AttrProbe     = "probe"
)

// TombstoneRemoves are the attributes a delete removes from a transaction
// item (what the fold and the API read of it besides its key and
// createdAt), probe included.
var TombstoneRemoves = []string{AttrType, AttrAmount, AttrCategory, AttrCostCenter, AttrPaymentMethod, AttrDescription,
	aggregates.AttrBusinessDate, aggregates.AttrPeriods, AttrCurrency, AttrProbe}

// IsTombstone reports whether item is a deleted transaction's tombstone.
func IsTombstone(item map[string]types.AttributeValue) bool {
	_, ok := item[AttrDeletedAt]
	return ok
}

// SigSize is the length of a sig: the first 16 bytes of a SHA-256.
const SigSize = 16

// sigVersion starts the digested text, so that another encoding can come.
const sigVersion = "ledger-sig-v1\n"

// sigFields are the attributes Sig digests, in this order: the key, every
// attribute the fold reads or validates (entityType, the figures, the
// breakdown names, createdAt and the stamp that place it in its periods,
// the currency), deletedAt and changes.
var sigFields = []string{AttrPK, AttrSK, AttrEntityType, AttrType, AttrAmount, AttrCategory, AttrCostCenter,
	AttrPaymentMethod, AttrCreatedAt, aggregates.AttrBusinessDate, aggregates.AttrPeriods, AttrCurrency,
	AttrDeletedAt, AttrChanges}

// Sig is the digest of a transaction item that its writes store under
// sig: the first SigSize bytes of SHA-256 over a canonical encoding of
// the item's sigFields. The encoding (docs/design.md, "Transaction") is
// sigVersion, then for each field in sigFields' order its name, a zero
// byte and
//
//   - 0x00 when the item does not hold it;
//   - 'S', the length of the text as 4 bytes big-endian, the text, for a
//     string;
//   - 'N', the same with the number's canonical text (no exponent, no
//     trailing zero of a fraction, no leading zero: "12.5" for "12.50"),
//     for a number (the text as stored when it is not a number);
//   - 'X', the same with the type's name (BOOL, M, B, …), for any other
//     type.
//
// The item's other attributes (description, version, updatedAt, sig,
// probe, …) are not digested. Sig is not keyed: it tells a write by
// another path from a write of the writer, not someone who means to pass
// for the writer.
func Sig(item map[string]types.AttributeValue) []byte {
	var b bytes.Buffer
	b.WriteString(sigVersion)
	field := func(tag byte, text string) {
		b.WriteByte(tag)
		_ = binary.Write(&b, binary.BigEndian, uint32(len(text)))
		b.WriteString(text)
	}
	for _, name := range sigFields {
		b.WriteString(name)
		b.WriteByte(0)
		switch v := item[name].(type) {
		case nil:
			b.WriteByte(0)
		case *types.AttributeValueMemberS:
			field('S', v.Value)
		case *types.AttributeValueMemberN:
			text := v.Value
			if d, err := decimal.NewFromString(v.Value); err == nil {
				text = d.String()
			}
			field('N', text)
		default:
			field('X', Image(map[string]types.AttributeValue{name: v})[name].Type)
		}
	}
	sum := sha256.Sum256(b.Bytes())
	return sum[:SigSize]
}

// SigMatches reports whether item holds the sig of what it holds.
func SigMatches(item map[string]types.AttributeValue) bool {
	v, ok := item[AttrSig].(*types.AttributeValueMemberB)
	return ok && bytes.Equal(v.Value, Sig(item))
}

// Changes reads item's change count: 0 and false when it has none (an
// item written before counting, or by another path).
func Changes(item map[string]types.AttributeValue) (int64, bool) {
	return Int64(item, AttrChanges)
}

// Count makes item, the whole item a write leaves, the item's changes-th
// version: it sets changes and the sig of the result, and drops probe.
func Count(item map[string]types.AttributeValue, changes int64) {
	delete(item, AttrProbe)
	item[AttrChanges] = Int(changes)
	item[AttrSig] = &types.AttributeValueMemberB{Value: Sig(item)}
}

// SigAV is sig as an attribute value.
func SigAV(sig []byte) types.AttributeValue { return &types.AttributeValueMemberB{Value: sig} }

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
