package infra

import (
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/ledger-dev/ledger/aggregates"
)

// The report item's attribute layout is part of the table definition: the
// stream consumers write report items (processor: EncodeReport for a
// repair, an UpdateItem of the same attributes for a commit), the writer,
// ledgerctl and the tests read them with DecodeReport. A report item is,
// under aggregates.ReportKey's key:
//
//	entityType                             REPORT
//	periodType, periodValue                S, the period
//	totalIncome, totalExpense              N, exact decimals
//	transactionCount                       N, an integer
//	updatedAt                              S, RFC 3339, the last commit
//	byCategory, byCostCenter, byPaymentMethod
//	                                       M of name → M of the three figures
//
// A breakdown may be absent (an empty map decodes badly from DynamoDB
// Local's stream) and so may a figure: it reads as zero.

// Attribute names of report items besides the keys. entityType and
// updatedAt are on every item the consumers write.
const (
	AttrEntityType       = "entityType"
	AttrPeriodType       = "periodType"
	AttrPeriodValue      = "periodValue"
	AttrTotalIncome      = "totalIncome"
	AttrTotalExpense     = "totalExpense"
	AttrTransactionCount = "transactionCount"
	AttrUpdatedAt        = "updatedAt"
)

// DecodeReport reads a stored report item's figures. Missing figures read as
// zero; a figure of the wrong type is an error. Breakdown entries whose
// figures are all zero are kept: Prune drops them.
func DecodeReport(item map[string]types.AttributeValue) (*aggregates.Report, error) {
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
		m, ok := v.(*types.AttributeValueMemberM)
		if !ok {
			return nil, fmt.Errorf("%s is not a map", d)
		}
		for name, e := range m.Value {
			em, ok := e.(*types.AttributeValueMemberM)
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

func decodeTotals(m map[string]types.AttributeValue) (aggregates.Totals, error) {
	var t aggregates.Totals
	var err error
	if t.Income, err = decimalAttr(m, AttrTotalIncome); err != nil {
		return t, err
	}
	if t.Expense, err = decimalAttr(m, AttrTotalExpense); err != nil {
		return t, err
	}
	count, err := decimalAttr(m, AttrTransactionCount)
	if err != nil {
		return t, err
	}
	if !count.IsInteger() {
		return t, fmt.Errorf("%s %s is not an integer", AttrTransactionCount, count)
	}
	t.Count = count.IntPart()
	return t, nil
}

func decimalAttr(m map[string]types.AttributeValue, name string) (decimal.Decimal, error) {
	v, ok := m[name]
	if !ok {
		return decimal.Zero, nil
	}
	n, ok := v.(*types.AttributeValueMemberN)
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
// reconcile repair writes it. Empty breakdowns are left out.
func EncodeReport(k aggregates.ReportKey, r *aggregates.Report, updatedAt string) map[string]types.AttributeValue {
	key := k.Key()
	item := map[string]types.AttributeValue{
		AttrPK:               &types.AttributeValueMemberS{Value: key.PK},
		AttrSK:               &types.AttributeValueMemberS{Value: key.SK},
		AttrEntityType:       &types.AttributeValueMemberS{Value: aggregates.EntityReport},
		AttrPeriodType:       &types.AttributeValueMemberS{Value: string(k.Period.Type)},
		AttrPeriodValue:      &types.AttributeValueMemberS{Value: k.Period.Value},
		AttrTotalIncome:      &types.AttributeValueMemberN{Value: r.Income.String()},
		AttrTotalExpense:     &types.AttributeValueMemberN{Value: r.Expense.String()},
		AttrTransactionCount: &types.AttributeValueMemberN{Value: strconv.FormatInt(r.Count, 10)},
		AttrUpdatedAt:        &types.AttributeValueMemberS{Value: updatedAt},
	}
	for _, d := range aggregates.Dimensions {
		if len(r.Breakdowns[d]) == 0 {
			continue
		}
		m := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
		for name, t := range r.Breakdowns[d] {
			m.Value[name] = TotalsAV(t)
		}
		item[d.Attribute()] = m
	}
	return item
}

// TotalsAV encodes figures as a breakdown entry.
func TotalsAV(t aggregates.Totals) *types.AttributeValueMemberM {
	return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		AttrTotalIncome:      &types.AttributeValueMemberN{Value: t.Income.String()},
		AttrTotalExpense:     &types.AttributeValueMemberN{Value: t.Expense.String()},
		AttrTransactionCount: &types.AttributeValueMemberN{Value: strconv.FormatInt(t.Count, 10)},
	}}
}
