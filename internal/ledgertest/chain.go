package ledgertest

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// ChainBranch is one branch of a Chain: its currency and its business
// calendar.
type ChainBranch struct {
	Currency string
	Calendar OracleCalendar
}

// Chain is a tenant of many branches in several currencies and time
// zones, the workload of issue 24's multi-shard proof of the tenant
// roll-ups: branch i keeps its books in Currencies[i%3] and its calendar
// is ChainCalendars[(i/3)%3], so every currency meets every zone.
type Chain struct {
	Tenant   string
	Branches map[string]ChainBranch // by branch id
	Names    []string               // the branch ids, in order
}

// ChainCurrencies are a chain's currencies: 2, 0 and 3 fraction digits
// (ISO 4217's minor units of BRL, JPY and BHD).
var ChainCurrencies = []string{"BRL", "JPY", "BHD"}

// ChainCalendars are a chain's calendars: three zones with different
// business-day cut-offs (São Paulo at 04:00, Tokyo at midnight, Bahrain
// at 22:30 — a day that starts the evening before its date's noon is far
// off), week starts and fiscal years.
var ChainCalendars = []OracleCalendar{
	{Zone: "America/Sao_Paulo", DayStart: 4 * 60, WeekStart: time.Sunday, FiscalStart: time.July},
	{Zone: "Asia/Tokyo", DayStart: 0, WeekStart: time.Monday, FiscalStart: time.April},
	{Zone: "Asia/Bahrain", DayStart: 22*60 + 30, WeekStart: time.Saturday, FiscalStart: time.January},
}

// NewChain returns a chain of n branches ("b000"…) of tenant.
func NewChain(tenant string, n int) *Chain {
	c := &Chain{Tenant: tenant, Branches: map[string]ChainBranch{}}
	for i := range n {
		id := fmt.Sprintf("b%03d", i)
		c.Names = append(c.Names, id)
		c.Branches[id] = ChainBranch{Currency: ChainCurrencies[i%len(ChainCurrencies)], Calendar: ChainCalendars[(i/len(ChainCurrencies))%len(ChainCalendars)]}
	}
	return c
}

// Calendars returns the chain's branch calendars with the tenant's default
// period types (DAILY, MONTHLY, YEARLY: the tenant item the workload's
// "other" steps rewrite keeps no reportPeriods).
func (c *Chain) Calendars() BranchCalendars {
	bc := BranchCalendars{}
	for id, b := range c.Branches {
		bc[c.Tenant+"/"+id] = struct {
			Calendar OracleCalendar
			Types    []aggregates.PeriodType
		}{b.Calendar, aggregates.DefaultPeriodTypes}
	}
	return bc
}

// Apply makes w write the chain: its tenant and branches, each
// transaction stamped in its branch's calendar, in its currency, with an
// amount of that currency's fraction digits.
func (c *Chain) Apply(w *Workload) {
	w.Tenants, w.Branches = []string{c.Tenant}, append([]string(nil), c.Names...)
	w.Stamp = c.Calendars().Stamper()
	w.Currency = func(tenant, branch string) string {
		if tenant != c.Tenant {
			return ""
		}
		return c.Branches[branch].Currency
	}
}

// WriteBranches puts the chain's branch items as the writer keeps them:
// the currency and the four calendar attributes (table/calendar.go), so
// that reconcile checks every stamp against its branch's calendar.
func (c *Chain) WriteBranches(ctx context.Context, api WriteAPI, tableName string) error {
	for _, id := range c.Names {
		b := c.Branches[id]
		cal, err := aggregates.NewCalendar(b.Calendar.Zone, aggregates.FormatDayStart(b.Calendar.DayStart), aggregates.FormatWeekday(b.Calendar.WeekStart), int(b.Calendar.FiscalStart))
		if err != nil {
			return fmt.Errorf("chain branch %s: %w", id, err)
		}
		k := aggregates.BranchKey(c.Tenant, id)
		item := table.EncodeCalendar(cal)
		item["PK"], item["SK"] = s(k.PK), s(k.SK)
		item["entityType"], item["name"] = s(aggregates.EntityBranch), s(id)
		item[aggregates.AttrCurrency] = s(b.Currency)
		if _, err := api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(tableName), Item: item}); err != nil {
			return fmt.Errorf("chain branch %s: %w", id, err)
		}
	}
	return nil
}

// digits returns the fraction digits of the amounts of the branch a
// transaction key belongs to: its currency's (2 without a currency, the
// amounts Workload has always written).
func (w *Workload) digits(k aggregates.Key) int {
	if w.Currency == nil {
		return 2
	}
	tenant, branch, _ := aggregates.ParseTransactionPK(k.PK)
	if c := w.Currency(tenant, branch); c != "" {
		return aggregates.CurrencyDigits(c)
	}
	return 2
}

// amountOf returns an amount with at most digits fraction digits, drawn
// as amount draws them (the same draws for 2 digits).
func (w *Workload) amountOf(digits int) string {
	if digits == 2 {
		return w.amount()
	}
	switch w.rng.IntN(5) {
	case 0:
		if digits == 0 {
			return "1"
		}
		return "0." + fmt.Sprintf("%0*d", digits, 1) // the smallest unit
	case 1:
		return fmt.Sprint(1 + w.rng.IntN(500))
	default:
		whole := w.rng.IntN(100000)
		if digits == 0 {
			return fmt.Sprint(1 + whole)
		}
		unit := 1
		for range digits {
			unit *= 10
		}
		return fmt.Sprintf("%d.%0*d", whole, digits, 1+w.rng.IntN(unit-1))
	}
}
