package writer

import (
	"fmt"
	"strconv"
	"strings"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// Attribute names of transaction items; the keys, TTL, entityType and
// updatedAt are the table's (infra).
const (
	attrPK         = table.AttrPK
	attrSK         = table.AttrSK
	attrEntityType = table.AttrEntityType
	attrID         = "id"
	attrTenant     = "tenantId"
	attrBranch     = "branchId"
	attrVersion    = "version"
	attrUpdatedAt  = table.AttrUpdatedAt
	attrExpiresAt  = table.AttrExpiresAt
)

func strAV(s string) *ddbtypes.AttributeValueMemberS {
	return &ddbtypes.AttributeValueMemberS{Value: s}
}

func intAV(n int64) *ddbtypes.AttributeValueMemberN {
	return &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func keyAV(k aggregates.Key) map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{attrPK: strAV(k.PK), attrSK: strAV(k.SK)}
}

func stringAttr(item map[string]ddbtypes.AttributeValue, name string) (string, bool) {
	v, ok := item[name].(*ddbtypes.AttributeValueMemberS)
	if !ok {
		return "", false
	}
	return v.Value, true
}

func intAttr(item map[string]ddbtypes.AttributeValue, name string) (int64, bool) {
	v, ok := item[name].(*ddbtypes.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	return n, err == nil
}

// Transaction is a transaction as the API shows it. Amounts are decimal
// strings, exact.
type Transaction struct {
	ID            string `json:"id"`
	Tenant        string `json:"tenant"`
	Branch        string `json:"branch"`
	Type          string `json:"type"`
	Amount        string `json:"amount"`
	Category      string `json:"category"`
	CostCenter    string `json:"costCenter,omitempty"`
	PaymentMethod string `json:"paymentMethod,omitempty"`
	Description   string `json:"description,omitempty"`
	CreatedAt     string `json:"createdAt"`
	UpdatedAt     string `json:"updatedAt"`
	Version       int64  `json:"version"`
}

// transactionItem encodes t, stored under k, as the item the stream
// consumers accept (aggregates.ParseTransaction), and checks that they do:
// the writer never writes an item the consumers would quarantine. The error
// is then the *aggregates.InvalidError.
func transactionItem(k aggregates.Key, t Transaction) (map[string]ddbtypes.AttributeValue, error) {
	item := keyAV(k)
	item[attrEntityType] = strAV(aggregates.EntityTransaction)
	item[attrID] = strAV(t.ID)
	item[attrTenant] = strAV(t.Tenant)
	item[attrBranch] = strAV(t.Branch)
	item[fieldType] = strAV(t.Type)
	item[fieldAmount] = &ddbtypes.AttributeValueMemberN{Value: t.Amount}
	item[fieldCategory] = strAV(t.Category)
	for name, v := range map[string]string{fieldCostCenter: t.CostCenter, fieldPaymentMethod: t.PaymentMethod, fieldDescription: t.Description} {
		if v != "" {
			item[name] = strAV(v)
		}
	}
	item[fieldCreatedAt] = strAV(t.CreatedAt)
	item[attrVersion] = intAV(t.Version)
	item[attrUpdatedAt] = strAV(t.UpdatedAt)
	if _, err := aggregates.ParseTransaction(toImage(item)); err != nil {
		return nil, err
	}
	return item, nil
}

// decodeTransaction reads a stored transaction item as the API shows it.
// It reads what is there even when the item is not a valid transaction
// (written by something other than the writer); amounts are the stored
// number text.
func decodeTransaction(item map[string]ddbtypes.AttributeValue) Transaction {
	var t Transaction
	t.ID, _ = stringAttr(item, attrID)
	if pk, ok := stringAttr(item, attrPK); ok {
		t.Tenant, t.Branch, _ = aggregates.ParseTransactionPK(pk)
	}
	t.Type, _ = stringAttr(item, fieldType)
	switch a := item[fieldAmount].(type) {
	case *ddbtypes.AttributeValueMemberN:
		t.Amount = a.Value
		if d, err := aggregates.ParseAmount(a.Value); err == nil {
			t.Amount = aggregates.FormatAmount(d)
		}
	case *ddbtypes.AttributeValueMemberS:
		t.Amount = a.Value
	}
	t.Category, _ = stringAttr(item, fieldCategory)
	t.CostCenter, _ = stringAttr(item, fieldCostCenter)
	t.PaymentMethod, _ = stringAttr(item, fieldPaymentMethod)
	t.Description, _ = stringAttr(item, fieldDescription)
	t.CreatedAt, _ = stringAttr(item, fieldCreatedAt)
	t.UpdatedAt, _ = stringAttr(item, attrUpdatedAt)
	t.Version, _ = intAttr(item, attrVersion)
	return t
}

// toImage is the domain's view of an item (as processor's, for the check in
// transactionItem).
func toImage(item map[string]ddbtypes.AttributeValue) aggregates.Image {
	img := make(aggregates.Image, len(item))
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

// Totals are report figures as the API shows them.
type Totals struct {
	TotalIncome      string `json:"totalIncome"`
	TotalExpense     string `json:"totalExpense"`
	TransactionCount int64  `json:"transactionCount"`
}

// Report is a report as the API shows it: its period, totals, breakdowns
// (entries whose figures are all zero are left out) and its freshness, the
// time the stream consumer last committed to it.
type Report struct {
	Tenant          string            `json:"tenant"`
	Branch          string            `json:"branch"`
	PeriodType      string            `json:"periodType"`
	PeriodValue     string            `json:"periodValue"`
	UpdatedAt       string            `json:"updatedAt,omitempty"`
	ByCategory      map[string]Totals `json:"byCategory"`
	ByCostCenter    map[string]Totals `json:"byCostCenter"`
	ByPaymentMethod map[string]Totals `json:"byPaymentMethod"`
	Totals
	// NextCursor (a single report's page) fetches the report's next entries
	// with ?cursor=; EntriesCursor (a report in a range) fetches the entries
	// that did not fit the range's page from the single report's endpoint.
	// Either is set only while breakdown entries remain.
	NextCursor    string `json:"nextCursor,omitempty"`
	EntriesCursor string `json:"entriesCursor,omitempty"`
}

// decodeReport reads a stored report (table.StoredReport: the report item
// and its entry items) as the API shows it: entries whose figures are all
// zero are left out. A malformed report is an error (reconcile --repair
// mends it).
func decodeReport(k aggregates.ReportKey, sr *table.StoredReport) (Report, error) {
	r, problems := sr.Decode()
	if len(problems) > 0 {
		return Report{}, fmt.Errorf("report %s is malformed (ledgerctl reconcile --repair mends it): %s", k, strings.Join(problems, "; "))
	}
	r.Prune()
	item := sr.Item
	out := Report{
		Tenant: k.Tenant, Branch: k.Branch, PeriodType: string(k.Period.Type), PeriodValue: k.Period.Value,
		Totals: totalsJSON(r.Totals),
	}
	out.UpdatedAt, _ = stringAttr(item, attrUpdatedAt)
	maps := [3]*map[string]Totals{&out.ByCategory, &out.ByCostCenter, &out.ByPaymentMethod}
	for _, d := range aggregates.Dimensions {
		*maps[d] = map[string]Totals{}
		for name, t := range r.Breakdowns[d] {
			(*maps[d])[name] = totalsJSON(t)
		}
	}
	return out, nil
}

func totalsJSON(t aggregates.Totals) Totals {
	return Totals{TotalIncome: aggregates.FormatAmount(t.Income), TotalExpense: aggregates.FormatAmount(t.Expense), TransactionCount: t.Count}
}
