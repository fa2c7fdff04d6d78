package writer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// The per-tenant currency cap (issue 24, hole 9 of the roll-up review).
//
// Every currency a tenant's branches use is one more roll-up: one more
// delta put in every commit of every shard that carries a branch of it,
// and K partial keys per period. Nothing of that is charged to the tenant,
// so the writer bounds it: a tenant's branches may use at most
// Config.MaxTenantCurrencies ISO codes (DefaultMaxTenantCurrencies; the
// branches without a currency are one more roll-up, "-", not counted).
//
// The count must hold against a hostile tenant that creates many branches
// at once, so it is kept in one item, not counted by a Query (which
// concurrent creations would all pass): TENANT#{t} / CURRENCIES, a string
// set `currencies` of every code the tenant has given a branch. It only
// grows (a deleted branch, or a branch whose currency a PATCH changed
// before its first transaction, keeps its code counted: its roll-up items
// may exist, and a set that shrank would need the branches read in the same
// transaction). A branch creation or a currency PATCH with a code the set
// does not hold adds, in its own TransactWriteItems, the update
// `ADD currencies :c` on condition
// `attribute_exists(PK) AND (attribute_not_exists(currencies) OR
// contains(currencies, :c) OR size(currencies) < :cap)` (a seed of no
// code has no attribute: DynamoDB refuses an empty set):
// two creations that race for the last place cannot both land. A code the
// set already holds needs no write (the set never loses it). A full set
// without the code is 422 too-many-currencies before anything is written.
//
// The item is created (seeded) by the first request that needs it, from
// one Query of the tenant's branch partition (the currencies its branches
// have: tenants from before the cap), Put on attribute_not_exists; the
// update's attribute_exists(PK) keeps any creation from landing before the
// seed, so the seed misses no branch a writer with the cap created. A seed
// may hold more codes than the cap (a tenant from before it): its branches
// keep their currencies and transactions; only a new code is refused.

// DefaultMaxTenantCurrencies is the default of Config.MaxTenantCurrencies.
const DefaultMaxTenantCurrencies = 8

// tenantCurrenciesSK is the sort key of a tenant's currency set item, in
// the tenant's own partition (TENANT#{t}).
const tenantCurrenciesSK = "CURRENCIES"

// attrCurrencies is the set of codes of the currency set item.
const attrCurrencies = "currencies"

func tenantCurrenciesKey(tenant string) aggregates.Key {
	return aggregates.Key{PK: aggregates.TenantKey(tenant).PK, SK: tenantCurrenciesSK}
}

// tooManyCurrencies is the 422 of a branch currency past the tenant's cap.
func tooManyCurrencies(tenant, currency string, limit int, have []string) *Problem {
	p := problem(http.StatusUnprocessableEntity, ProblemTooManyCurrencies,
		fmt.Sprintf("tenant %s has branches in %d currencies (%s), the most a tenant may have (%d): %s would be one more roll-up for every period; give the branch one of those, or none",
			tenant, len(have), strings.Join(have, ", "), limit, currency))
	p.Field = "currency"
	return p
}

// currencyCap returns the action that records currency in the tenant's
// currency set, nil when the set holds it already (or the cap is off), or
// the 422 when the set is full without it. It reads the set (strongly
// consistent) and seeds it when it is absent. Called from a mutation's
// prepare, so a failed condition prepares it again from a fresh read.
func (s *Server) currencyCap(ctx context.Context, tenant, currency string) (*action, *Problem, error) {
	limit := s.cfg.MaxTenantCurrencies
	if currency == "" || limit < 0 {
		return nil, nil, nil
	}
	have, ok, err := s.tenantCurrencies(ctx, tenant)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		if err := s.seedTenantCurrencies(ctx, tenant); err != nil {
			return nil, nil, err
		}
		if have, _, err = s.tenantCurrencies(ctx, tenant); err != nil {
			return nil, nil, err
		}
	}
	if slices.Contains(have, currency) {
		return nil, nil, nil
	}
	if len(have) >= limit {
		return nil, tooManyCurrencies(tenant, currency, limit, have), nil
	}
	k := tenantCurrenciesKey(tenant)
	a := action{
		item: ddbtypes.TransactWriteItem{Update: &ddbtypes.Update{
			TableName: &s.cfg.Table, Key: keyAV(k),
			UpdateExpression:         aws.String("ADD #cs :set"),
			ConditionExpression:      aws.String("attribute_exists(#pk) AND (attribute_not_exists(#cs) OR contains(#cs, :cur) OR size(#cs) < :cap)"),
			ExpressionAttributeNames: map[string]string{"#pk": attrPK, "#cs": attrCurrencies},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
				":set": &ddbtypes.AttributeValueMemberSS{Value: []string{currency}},
				":cur": strAV(currency),
				":cap": &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(limit)},
			},
		}},
		// Another request took the last place (or the set was deleted by
		// hand): prepare again, which reads the set and answers 422 or
		// seeds it.
		onFail: prepareAgain,
	}
	return &a, nil, nil
}

// tenantCurrencies reads the tenant's currency set: its codes, sorted, and
// whether the item exists.
func (s *Server) tenantCurrencies(ctx context.Context, tenant string) ([]string, bool, error) {
	item, err := s.getItem(ctx, tenantCurrenciesKey(tenant))
	if err != nil || item == nil {
		return nil, false, err
	}
	var have []string
	switch v := item[attrCurrencies].(type) {
	case nil:
	case *ddbtypes.AttributeValueMemberSS:
		have = slices.Clone(v.Value)
	default:
		return nil, false, fmt.Errorf("tenant %s: the currency set item's %s is %T, not a string set (damaged by hand: delete the item, the next branch write seeds it again)", tenant, attrCurrencies, v)
	}
	slices.Sort(have)
	return have, true, nil
}

// seedTenantCurrencies creates the tenant's currency set from the
// currencies its branches have (table.BranchCurrencies, strongly
// consistent), on condition that it does not exist: a seed that loses to
// another is no error. A damaged branch currency fails it (500, logged).
func (s *Server) seedTenantCurrencies(ctx context.Context, tenant string) error {
	have, err := table.BranchCurrencies(ctx, s.api, s.cfg.Table, tenant, true)
	if err != nil {
		return fmt.Errorf("tenant %s: seeding the currency set: %w", tenant, err)
	}
	codes := slices.DeleteFunc(have, func(c string) bool { return c == aggregates.NoCurrency }) // sorted
	k := tenantCurrenciesKey(tenant)
	item := map[string]ddbtypes.AttributeValue{attrPK: strAV(k.PK), attrSK: strAV(k.SK)}
	if len(codes) > 0 { // DynamoDB refuses an empty set: an item without the attribute is the empty set
		item[attrCurrencies] = &ddbtypes.AttributeValueMemberSS{Value: codes}
	}
	_, err = s.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.cfg.Table, Item: item,
		ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": attrPK},
	})
	var ccf *ddbtypes.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return s.dynamoError("PutItem", err)
	}
	return nil
}
