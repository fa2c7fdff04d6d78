package table

import (
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// DamagedCurrencyError is a branch item whose currency attribute is not a
// valid currency code (damaged by hand or by another writer): the writer
// refuses the branch's creates and changes rather than stamp it, and a
// roll-up read cannot tell which currency the branch's reports are in.
type DamagedCurrencyError struct {
	PK, SK string // the branch item's key
	Err    error
}

func (e *DamagedCurrencyError) Error() string {
	return fmt.Sprintf("branch item %s/%s: stored currency: %v", e.PK, e.SK, e.Err)
}

func (e *DamagedCurrencyError) Unwrap() error { return e.Err }

// BranchCurrency reads the currency of a branch item ("" when it has
// none); an attribute that is not a string holding a valid code is a
// *DamagedCurrencyError.
func BranchCurrency(item map[string]types.AttributeValue) (string, error) {
	av, ok := item[AttrCurrency]
	if !ok {
		return "", nil
	}
	var err error
	c, isS := av.(*types.AttributeValueMemberS)
	switch {
	case !isS:
		err = fmt.Errorf("%T, want a string", av)
	default:
		err = aggregates.ValidateCurrency(c.Value)
	}
	if err != nil {
		pk, _ := String(item, AttrPK)
		sk, _ := String(item, AttrSK)
		return "", &DamagedCurrencyError{PK: pk, SK: sk, Err: err}
	}
	return c.Value, nil
}

// BranchCurrencies lists the currencies of the tenant's branches, sorted,
// aggregates.NoCurrency for branches without one: one Query of the
// tenant's branch partition projected on the currency (strongly
// consistent when consistent), every page. A damaged branch currency is a
// *DamagedCurrencyError; a failed Query is returned wrapped.
func BranchCurrencies(ctx context.Context, api dynamodb.QueryAPIClient, tableName, tenant string, consistent bool) ([]string, error) {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(tableName),
		ConsistentRead:            aws.Bool(consistent),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ProjectionExpression:      aws.String("#pk, #sk, #cur"),
		ExpressionAttributeNames:  map[string]string{"#pk": AttrPK, "#sk": AttrSK, "#cur": AttrCurrency},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(aggregates.BranchPK(tenant))},
	}
	seen := map[string]bool{}
	p := dynamodb.NewQueryPaginator(api, in)
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list the branches of tenant %s: %w", tenant, err)
		}
		for _, item := range out.Items {
			c, err := BranchCurrency(item)
			if err != nil {
				return nil, err
			}
			if c == "" {
				c = aggregates.NoCurrency
			}
			seen[c] = true
		}
	}
	curs := make([]string, 0, len(seen))
	for c := range seen {
		curs = append(curs, c)
	}
	slices.Sort(curs)
	return curs, nil
}
