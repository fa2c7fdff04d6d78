package processor

import (
	"fmt"
	"strconv"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/ledger-dev/ledger/aggregates"
)

// Attribute names of report items (DESIGN.md, "Report attributes").
const (
	attrPK               = "PK"
	attrSK               = "SK"
	attrEntityType       = "entityType"
	attrPeriodType       = "periodType"
	attrPeriodValue      = "periodValue"
	attrTotalIncome      = "totalIncome"
	attrTotalExpense     = "totalExpense"
	attrTransactionCount = "transactionCount"
	attrUpdatedAt        = "updatedAt"
	attrExpiresAt        = "expiresAt"
	attrSequenceNumber   = "sequenceNumber"
)

// toImage converts a DynamoDB item to the domain's view of it: type tags for
// every attribute and the text of S and N values.
func toImage(item map[string]ddbtypes.AttributeValue) aggregates.Image {
	img := make(aggregates.Image, len(item))
	for name, v := range item {
		switch v := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			img[name] = aggregates.Attr{Type: "S", Value: v.Value}
		case *ddbtypes.AttributeValueMemberN:
			img[name] = aggregates.Attr{Type: "N", Value: v.Value}
		case *ddbtypes.AttributeValueMemberBOOL:
			img[name] = aggregates.Attr{Type: "BOOL", Value: strconv.FormatBool(v.Value)}
		case *ddbtypes.AttributeValueMemberM:
			img[name] = aggregates.Attr{Type: "M"}
		case *ddbtypes.AttributeValueMemberL:
			img[name] = aggregates.Attr{Type: "L"}
		case *ddbtypes.AttributeValueMemberB:
			img[name] = aggregates.Attr{Type: "B"}
		case *ddbtypes.AttributeValueMemberSS:
			img[name] = aggregates.Attr{Type: "SS"}
		case *ddbtypes.AttributeValueMemberNS:
			img[name] = aggregates.Attr{Type: "NS"}
		case *ddbtypes.AttributeValueMemberBS:
			img[name] = aggregates.Attr{Type: "BS"}
		case *ddbtypes.AttributeValueMemberNULL:
			img[name] = aggregates.Attr{Type: "NULL"}
		default:
			img[name] = aggregates.Attr{Type: "?"}
		}
	}
	return img
}

func stringAttr(item map[string]ddbtypes.AttributeValue, name string) (string, bool) {
	v, ok := item[name].(*ddbtypes.AttributeValueMemberS)
	if !ok {
		return "", false
	}
	return v.Value, true
}

func numberAV(d decimal.Decimal) *ddbtypes.AttributeValueMemberN {
	return &ddbtypes.AttributeValueMemberN{Value: d.String()}
}

func intAV(n int64) *ddbtypes.AttributeValueMemberN {
	return &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func strAV(s string) *ddbtypes.AttributeValueMemberS {
	return &ddbtypes.AttributeValueMemberS{Value: s}
}

func keyAV(k aggregates.Key) map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{attrPK: strAV(k.PK), attrSK: strAV(k.SK)}
}

// totalsAV encodes figures as a breakdown entry map.
func totalsAV(t aggregates.Totals) *ddbtypes.AttributeValueMemberM {
	return &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{
		attrTotalIncome:      numberAV(t.Income),
		attrTotalExpense:     numberAV(t.Expense),
		attrTransactionCount: intAV(t.Count),
	}}
}

// DecodeReport reads a stored report item's figures. Missing figures read as
// zero; a figure of the wrong type is an error.
func DecodeReport(item map[string]ddbtypes.AttributeValue) (*aggregates.Report, error) {
	r := &aggregates.Report{}
	var err error
	if r.Totals, err = decodeTotals(item); err != nil {
		return nil, err
	}
	for _, d := range aggregates.Dimensions {
		v, ok := item[d.Attribute()]
		if !ok {
			continue
		}
		m, ok := v.(*ddbtypes.AttributeValueMemberM)
		if !ok {
			return nil, fmt.Errorf("%s is not a map", d)
		}
		for name, e := range m.Value {
			em, ok := e.(*ddbtypes.AttributeValueMemberM)
			if !ok {
				return nil, fmt.Errorf("%s[%q] is not a map", d, name)
			}
			t, err := decodeTotals(em.Value)
			if err != nil {
				return nil, fmt.Errorf("%s[%q]: %w", d, name, err)
			}
			if r.Breakdowns[d] == nil {
				r.Breakdowns[d] = map[string]aggregates.Totals{}
			}
			r.Breakdowns[d][name] = t
		}
	}
	return r, nil
}

func decodeTotals(m map[string]ddbtypes.AttributeValue) (aggregates.Totals, error) {
	var t aggregates.Totals
	var err error
	if t.Income, err = decimalAttr(m, attrTotalIncome); err != nil {
		return t, err
	}
	if t.Expense, err = decimalAttr(m, attrTotalExpense); err != nil {
		return t, err
	}
	count, err := decimalAttr(m, attrTransactionCount)
	if err != nil {
		return t, err
	}
	if !count.IsInteger() {
		return t, fmt.Errorf("%s %s is not an integer", attrTransactionCount, count)
	}
	t.Count = count.IntPart()
	return t, nil
}

func decimalAttr(m map[string]ddbtypes.AttributeValue, name string) (decimal.Decimal, error) {
	v, ok := m[name]
	if !ok {
		return decimal.Zero, nil
	}
	n, ok := v.(*ddbtypes.AttributeValueMemberN)
	if !ok {
		return decimal.Zero, fmt.Errorf("%s is not a number", name)
	}
	d, err := aggregates.ParseAmount(n.Value)
	if err != nil {
		return decimal.Zero, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}

// EncodeReport returns the full item of a report with figures r, as the
// reconcile repair writes it. Empty breakdowns are left out (an empty map
// decodes badly from DynamoDB Local's stream).
func EncodeReport(k aggregates.ReportKey, r *aggregates.Report, updatedAt string) map[string]ddbtypes.AttributeValue {
	item := keyAV(k.Key())
	item[attrEntityType] = strAV(aggregates.EntityReport)
	item[attrPeriodType] = strAV(string(k.Period.Type))
	item[attrPeriodValue] = strAV(k.Period.Value)
	item[attrTotalIncome] = numberAV(r.Income)
	item[attrTotalExpense] = numberAV(r.Expense)
	item[attrTransactionCount] = intAV(r.Count)
	item[attrUpdatedAt] = strAV(updatedAt)
	for _, d := range aggregates.Dimensions {
		if len(r.Breakdowns[d]) == 0 {
			continue
		}
		m := &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{}}
		for name, t := range r.Breakdowns[d] {
			m.Value[name] = totalsAV(t)
		}
		item[d.Attribute()] = m
	}
	return item
}
