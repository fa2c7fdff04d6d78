package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// storedReport is one report item read back from the table.
type storedReport struct {
	Key       aggregates.ReportKey
	Report    *aggregates.Report
	UpdatedAt string
}

// view is the report as the writer's API shows it (docs/api.md), so that
// `ledgerctl report --json` and GET …/reports print the same thing.
func (s storedReport) view() writer.Report {
	r := writer.Report{
		Tenant: s.Key.Tenant, Branch: s.Key.Branch,
		PeriodType: string(s.Key.Period.Type), PeriodValue: s.Key.Period.Value,
		UpdatedAt: s.UpdatedAt,
		Totals:    totalsView(s.Report.Totals),
	}
	maps := [3]*map[string]writer.Totals{&r.ByCategory, &r.ByCostCenter, &r.ByPaymentMethod}
	for _, d := range aggregates.Dimensions {
		*maps[d] = map[string]writer.Totals{}
		for name, t := range s.Report.Breakdowns[d] {
			(*maps[d])[name] = totalsView(t)
		}
	}
	return r
}

func totalsView(t aggregates.Totals) writer.Totals {
	return writer.Totals{TotalIncome: aggregates.FormatAmount(t.Income), TotalExpense: aggregates.FormatAmount(t.Expense), TransactionCount: t.Count}
}

// QueryAPI is what reading reports needs.
type QueryAPI interface {
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// readReports reads the reports of one branch and period type, from and to
// inclusive (empty: unbounded), in period order, with consistent reads.
func readReports(ctx context.Context, api QueryAPI, tableName, tenant, branch string, pt aggregates.PeriodType, from, to string) ([]storedReport, error) {
	pk := aggregates.ReportPK(tenant, branch)
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(tableName),
		ConsistentRead:            aws.Bool(true),
		ExpressionAttributeNames:  map[string]string{"#pk": "PK", "#sk": "SK"},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": &ddbtypes.AttributeValueMemberS{Value: pk}},
	}
	lo, hi := string(pt)+"#", string(pt)+"#\uffff"
	if from != "" {
		lo = string(pt) + "#" + from
	}
	if to != "" {
		hi = string(pt) + "#" + to
	}
	in.KeyConditionExpression = aws.String("#pk = :pk AND #sk BETWEEN :lo AND :hi")
	in.ExpressionAttributeValues[":lo"] = &ddbtypes.AttributeValueMemberS{Value: lo}
	in.ExpressionAttributeValues[":hi"] = &ddbtypes.AttributeValueMemberS{Value: hi}

	if to != "" {
		in.ExpressionAttributeValues[":hi"] = &ddbtypes.AttributeValueMemberS{Value: hi + "$"} // with its entry items
	}
	set := table.ReportSet{}
	for {
		page, err := api.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("query reports of %s/%s: %w", tenant, branch, err)
		}
		for _, item := range page.Items {
			if err := set.Add(item); err != nil {
				return nil, err
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
	var out []storedReport
	for _, k := range set.Keys() {
		sr := set[k]
		if !sr.Exists() {
			continue
		}
		r, problems := sr.Decode()
		if len(problems) > 0 {
			return nil, fmt.Errorf("report %s is malformed (ledgerctl reconcile --repair mends it): %s", k, strings.Join(problems, "; "))
		}
		r.Prune()
		out = append(out, storedReport{Key: k, Report: r, UpdatedAt: sr.UpdatedAt()})
	}
	return out, nil
}

// printReports writes reports as an aligned table: one row per report with
// its totals, net and count, and with breakdown set, one indented row per
// entry of that breakdown under it. Amounts are the exact decimals stored.
func printReports(w io.Writer, reports []storedReport, breakdown *aggregates.Dimension) error {
	t := newTable("tenant", "branch", "period", "income", "expense", "net", "count").alignRight(3, 4, 5, 6)
	for _, s := range reports {
		r := s.Report.Totals
		t.add(s.Key.Tenant, s.Key.Branch, s.Key.Period.Value, money(r.Income), money(r.Expense), money(r.Income.Sub(r.Expense)), fmt.Sprint(r.Count))
		if breakdown == nil {
			continue
		}
		entries := s.Report.Breakdowns[*breakdown]
		for _, n := range sortedKeys(entries) {
			e := entries[n]
			t.add("", "", "  "+n, money(e.Income), money(e.Expense), money(e.Income.Sub(e.Expense)), fmt.Sprint(e.Count))
		}
	}
	return t.write(w)
}

// money prints an amount exactly, with at least two decimals.
func money(d decimal.Decimal) string {
	if d.Exponent() >= -2 {
		return d.StringFixed(2)
	}
	return d.String()
}

func parseDimension(s string) (*aggregates.Dimension, error) {
	switch strings.ToLower(s) {
	case "", "none":
		return nil, nil
	case "category", "bycategory":
		d := aggregates.ByCategory
		return &d, nil
	case "costcenter", "bycostcenter", "cost-center":
		d := aggregates.ByCostCenter
		return &d, nil
	case "paymentmethod", "bypaymentmethod", "payment-method":
		d := aggregates.ByPaymentMethod
		return &d, nil
	}
	return nil, fmt.Errorf("--breakdown %q: want category, costCenter, paymentMethod or none", s)
}

const reportHelp = `Prints the reports of one branch (--tenant, --branch) for one period type,
read from the table with consistent reads: a table with income, expense, net
and transaction count per period (and, with --breakdown, one row per entry of
that breakdown), or with --json the same JSON objects the writer's API
serves (docs/api.md). Reports are written by the stream consumers, so they
trail the transactions by the stream's lag ('ledgerctl lag').

Without --branch it prints the tenant's roll-ups (docs/api.md, "Tenant
roll-ups"): all its branches together, one table per currency (the
currencies of its branches, "-" for those without one; --currency for one),
with the number of branches that contributed. Roll-ups trail the branch
reports by one more commit of the consumers.
Exit status: 0 printed (possibly nothing), 2 error.`

func (e *environment) report(ctx context.Context, args []string) int {
	fs := e.flags("report --tenant T [--branch B | --currency C]", reportHelp)
	tenant := fs.String("tenant", "", "the `TENANT` (required)")
	branch := fs.String("branch", "", "the `BRANCH`; without it, the tenant's roll-ups")
	currency := fs.String("currency", "", "roll-ups only: the `CURRENCY` (ISO 4217 code, or - for the branches without one); default: every currency of the tenant's branches")
	period := fs.String("period", "MONTHLY", "`TYPE` of period: DAILY, WEEKLY, MONTHLY, QUARTERLY, YEARLY, FISCAL_QUARTER or FISCAL_YEAR (in each branch's business calendar)")
	from := fs.String("from", "", "first `PERIOD` (as --period: YYYY-MM-DD for DAILY and WEEKLY, YYYY-MM, YYYY-Qn, YYYY, FYyyyy-Qn, FYyyyy), inclusive; default: the earliest")
	to := fs.String("to", "", "last `PERIOD`, inclusive; default: the latest")
	breakdown := fs.String("breakdown", "none", "also print one breakdown: category, costCenter, paymentMethod or none")
	asJSON := fs.Bool("json", false, "print a JSON array of reports instead of a table")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return e.fail(fmt.Errorf("report: unexpected argument %q", fs.Arg(0)))
	}
	if *tenant == "" {
		return e.fail(errors.New("report: --tenant is required"))
	}
	if *branch != "" && *currency != "" {
		return e.fail(errors.New("report: --currency is for the tenant's roll-ups (without --branch); a branch's reports are in its own currency"))
	}
	if *currency != "" {
		if err := aggregates.ValidateRollupCurrency(*currency); err != nil {
			return e.fail(fmt.Errorf("report: --currency: %w", err))
		}
	}
	pt, err := aggregates.ParsePeriodType(strings.ToUpper(*period))
	if err != nil {
		return e.fail(fmt.Errorf("report: --period: %w", err))
	}
	for name, v := range map[string]string{"from": *from, "to": *to} {
		if v == "" {
			continue
		}
		if _, err := aggregates.ParsePeriod(pt, v); err != nil {
			return e.fail(fmt.Errorf("report: --%s: %w", name, err))
		}
	}
	dim, err := parseDimension(*breakdown)
	if err != nil {
		return e.fail(fmt.Errorf("report: %w", err))
	}
	c, err := e.dynamo(ctx)
	if err != nil {
		return e.fail(err)
	}
	if *branch == "" {
		return e.rollupReport(ctx, c, *tenant, *currency, pt, *from, *to, dim, *asJSON)
	}
	reports, err := readReports(ctx, c, e.table, *tenant, *branch, pt, *from, *to)
	if err != nil {
		return e.fail(err)
	}
	if *asJSON {
		views := make([]writer.Report, 0, len(reports))
		for _, r := range reports {
			views = append(views, r.view())
		}
		b, err := json.MarshalIndent(views, "", "  ")
		if err != nil {
			return e.fail(err)
		}
		fmt.Fprintf(e.stdout, "%s\n", b)
		return exitOK
	}
	if len(reports) == 0 {
		fmt.Fprintf(e.stdout, "no %s reports for tenant %s, branch %s\n", pt, *tenant, *branch)
		return exitOK
	}
	if err := printReports(e.stdout, reports, dim); err != nil {
		return e.fail(err)
	}
	return exitOK
}
