package writer

import (
	"fmt"
	"strings"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// Attribute names the writer's items share with the table's layouts
// (package table).
const (
	attrPK         = table.AttrPK
	attrSK         = table.AttrSK
	attrEntityType = table.AttrEntityType
	attrID         = table.AttrID
	attrTenant     = table.AttrTenantID
	attrBranch     = table.AttrBranchID
	attrVersion    = table.AttrVersion
	attrUpdatedAt  = table.AttrUpdatedAt
	attrExpiresAt  = table.AttrExpiresAt
)

// The table's attribute-value helpers, under the names the writer's item
// code uses.
var (
	strAV      = table.S
	intAV      = table.Int
	keyAV      = table.Key
	stringAttr = table.String
	intAttr    = table.Int64
)

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
	// BusinessDate and Periods are the stamp (table.Transaction). The API
	// shows the business date only; for a transaction stored without a
	// stamp, its UTC date (decodeTransaction), where it counts.
	BusinessDate string `json:"businessDate,omitempty"`
	Periods      string `json:"-"`
	// Currency is the currency of Amount: its branch's when it was written
	// (absent: the branch has none).
	Currency string `json:"currency,omitempty"`
}

// transactionItem encodes t, stored under k, as the item the stream
// consumers accept (table.EncodeTransaction): an invalid t is the
// *aggregates.InvalidError.
func transactionItem(k aggregates.Key, t Transaction) (map[string]ddbtypes.AttributeValue, error) {
	return table.EncodeTransaction(k, table.Transaction(t))
}

// decodeTransaction reads a stored transaction item as the API shows it
// (table.DecodeTransaction). An item stored without a stamp (written
// before business calendars, or by another path) counts in its UTC date's
// DAILY, MONTHLY and YEARLY reports (aggregates.LegacyStamp): its
// BusinessDate is that date, its Periods stay "".
func decodeTransaction(item map[string]ddbtypes.AttributeValue) Transaction {
	t := Transaction(table.DecodeTransaction(item))
	if t.BusinessDate == "" && t.Periods == "" {
		t.BusinessDate = legacyBusinessDate(item)
	}
	return t
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
