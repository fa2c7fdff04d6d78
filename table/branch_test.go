package table_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/table"
)

func TestBranchCurrency(t *testing.T) {
	key := map[string]types.AttributeValue{table.AttrPK: table.S(aggregates.BranchPK("t1")), table.AttrSK: table.S("BRANCH#b1")}
	with := func(av types.AttributeValue) map[string]types.AttributeValue {
		item := map[string]types.AttributeValue{}
		for k, v := range key {
			item[k] = v
		}
		if av != nil {
			item[table.AttrCurrency] = av
		}
		return item
	}
	tests := []struct {
		name    string
		item    map[string]types.AttributeValue
		want    string
		damaged bool
	}{
		{"absent", with(nil), "", false},
		{"valid", with(table.S("BRL")), "BRL", false},
		{"not a code", with(table.S("XYZ")), "", true},
		{"lower case", with(table.S("brl")), "", true},
		{"not money", with(table.S("XAU")), "", true},
		{"a number", with(&types.AttributeValueMemberN{Value: "986"}), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := table.BranchCurrency(tt.item)
			var d *table.DamagedCurrencyError
			assert.Equal(t, tt.damaged, errors.As(err, &d), "damaged: %v", err)
			if tt.damaged {
				assert.Equal(t, aggregates.BranchPK("t1"), d.PK)
				assert.Equal(t, "BRANCH#b1", d.SK)
				assert.Contains(t, err.Error(), "BRANCH#b1")
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestBranchCurrencies_ListsEachCurrencyOnceOverPages reads the branch
// partition of a tenant with more branches than one page holds (the
// projection is small, so the page limit is forced by Limit on a wrapping
// client), in two currencies and without one, beside another tenant's.
func TestBranchCurrencies_ListsEachCurrencyOnceOverPages(t *testing.T) {
	ctx := context.Background()
	client := ddbtest.Client(t)
	name := ddbtest.NewTable(t, client)
	put := func(tenant, branch, cur string) {
		item := map[string]types.AttributeValue{table.AttrPK: table.S(aggregates.BranchPK(tenant)), table.AttrSK: table.S("BRANCH#" + branch)}
		if cur != "" {
			item[table.AttrCurrency] = table.S(cur)
		}
		_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name), Item: item})
		require.NoError(t, err)
	}
	for i := range 7 {
		put("chain", fmt.Sprintf("b%d", i), []string{"BRL", "JPY", ""}[i%3])
	}
	put("other", "x", "EUR")
	paged := limitQuery{next: client, limit: 2, calls: new(int)}
	curs, err := table.BranchCurrencies(ctx, paged, name, "chain", true)
	require.NoError(t, err)
	assert.Equal(t, []string{aggregates.NoCurrency, "BRL", "JPY"}, curs)
	assert.Greater(t, *paged.calls, 3, "read over pages")

	curs, err = table.BranchCurrencies(ctx, client, name, "nobody", true)
	require.NoError(t, err)
	assert.Empty(t, curs)

	put("chain", "bad", "EURO")
	_, err = table.BranchCurrencies(ctx, client, name, "chain", true)
	var d *table.DamagedCurrencyError
	require.ErrorAs(t, err, &d)
	assert.Equal(t, "BRANCH#bad", d.SK)
}

// limitQuery caps every Query's page at limit items and counts the calls.
type limitQuery struct {
	next  dynamodb.QueryAPIClient
	limit int32
	calls *int
}

func (l limitQuery) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	*l.calls++
	in.Limit = aws.Int32(l.limit)
	return l.next.Query(ctx, in, opts...)
}
