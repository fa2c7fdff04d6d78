package table

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sort"

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
//	sig                        B, 16 bytes: Sig of the item as written (every attribute but sig)
//	deletedAt                  S, RFC 3339: only on a tombstone (a deleted transaction)
//	probe                      S, only on an item a rebase probed (exactly-once.md); every write removes it
//	compacting                 S, only on a tombstone a compaction marked (table/applied.go)
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
// and holds deletedAt instead of the fields (TombstoneRemoves); its
// version is a string (S "2"), so that a writer of a version before
// tombstones, which would read it as a transaction, reads no version and
// its writes' conditions fail (docs/design.md, "Transaction"). Ids are
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
	// AttrCompacting marks a tombstone a compaction is retiring
	// (MarkTombstone): the id of its run.
	AttrCompacting = "compacting"
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
const sigVersion = "ledger-sig-v2\n"

// Sig is the digest of a transaction item that its writes store under
// sig: the first SigSize bytes of SHA-256 over a canonical encoding of
// every attribute of the item but sig itself, with its DynamoDB type (the
// second review of issue 25, W-a: a digest of some attributes misses an
// edit of another one the fold validates, entityType or amount's type).
// The encoding (docs/design.md, "Transaction") is sigVersion, then the
// number of attributes, then for each attribute in the byte order of
// their names: the name, then its value. Every length and count is 4
// bytes big-endian; a text is its length and its bytes. A value is a tag
// and its content:
//
//   - 'S' and the text, for a string;
//   - 'N' and the number's canonical text (no exponent, no trailing zero
//     of a fraction, no leading zero: "12.5" for "12.50"; the text as
//     stored when it is not a number);
//   - 'B' and the bytes;
//   - 'T' or 'F' for a BOOL, '0' for NULL;
//   - 's', 'n' or 'b' (SS, NS, BS): the count, then the members'
//     encodings (as S, N, B, without the tag) sorted bytewise;
//   - 'L' and the count, then each element's value in order;
//   - 'M' and the count, then each entry's name and value in the byte
//     order of the names.
//
// Sig is not keyed: it tells a write by another path from a write of the
// writer, not someone who means to pass for the writer.
func Sig(item map[string]types.AttributeValue) []byte {
	var b bytes.Buffer
	b.WriteString(sigVersion)
	names := make([]string, 0, len(item))
	for name := range item {
		if name != AttrSig {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	sigCount(&b, len(names))
	for _, name := range names {
		sigText(&b, name)
		sigValue(&b, item[name])
	}
	sum := sha256.Sum256(b.Bytes())
	return sum[:SigSize]
}

func sigCount(b *bytes.Buffer, n int) { _ = binary.Write(b, binary.BigEndian, uint32(n)) }

func sigText(b *bytes.Buffer, text string) {
	sigCount(b, len(text))
	b.WriteString(text)
}

func canonicalNumber(v string) string {
	if d, err := decimal.NewFromString(v); err == nil {
		return d.String()
	}
	return v
}

// sigSet writes the count and the sorted members of a set.
func sigSet(b *bytes.Buffer, members []string) {
	sort.Strings(members)
	sigCount(b, len(members))
	for _, m := range members {
		sigText(b, m)
	}
}

func sigValue(b *bytes.Buffer, v types.AttributeValue) {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		b.WriteByte('S')
		sigText(b, v.Value)
	case *types.AttributeValueMemberN:
		b.WriteByte('N')
		sigText(b, canonicalNumber(v.Value))
	case *types.AttributeValueMemberB:
		b.WriteByte('B')
		sigText(b, string(v.Value))
	case *types.AttributeValueMemberBOOL:
		if v.Value {
			b.WriteByte('T')
		} else {
			b.WriteByte('F')
		}
	case *types.AttributeValueMemberNULL:
		b.WriteByte('0')
	case *types.AttributeValueMemberSS:
		b.WriteByte('s')
		sigSet(b, slices.Clone(v.Value))
	case *types.AttributeValueMemberNS:
		b.WriteByte('n')
		ms := make([]string, len(v.Value))
		for i, m := range v.Value {
			ms[i] = canonicalNumber(m)
		}
		sigSet(b, ms)
	case *types.AttributeValueMemberBS:
		b.WriteByte('b')
		ms := make([]string, len(v.Value))
		for i, m := range v.Value {
			ms[i] = string(m)
		}
		sigSet(b, ms)
	case *types.AttributeValueMemberL:
		b.WriteByte('L')
		sigCount(b, len(v.Value))
		for _, e := range v.Value {
			sigValue(b, e)
		}
	case *types.AttributeValueMemberM:
		b.WriteByte('M')
		keys := make([]string, 0, len(v.Value))
		for k := range v.Value {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		sigCount(b, len(keys))
		for _, k := range keys {
			sigText(b, k)
			sigValue(b, v.Value[k])
		}
	default:
		b.WriteByte('?')
	}
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
