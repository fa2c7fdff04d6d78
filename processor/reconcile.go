package processor

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra"
)

// ReconcileAPI is the part of the DynamoDB API reconcile uses.
type ReconcileAPI interface {
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

// Scope selects the branches to reconcile: one branch, or every branch of
// the table when Tenant and Branch are empty.
type Scope struct{ Tenant, Branch string }

// Difference is one report whose stored figures differ from the fold of the
// valid transactions in the table.
type Difference struct {
	Report   aggregates.ReportKey
	Stored   *aggregates.Report // nil when the item does not exist
	Expected *aggregates.Report
	Lines    []string // "field: got stored; want expected"
	// seen is the stored item's updatedAt, the repair's condition.
	seen string
}

func (d Difference) String() string {
	return d.Report.String() + "\n  " + strings.Join(d.Lines, "\n  ")
}

// ReconcileStats counts what a reconcile read.
type ReconcileStats struct {
	Transactions, Invalid, Reports int
}

// Reconcile recomputes every report in scope from the transactions in the
// table, with the same domain arithmetic as the consumers but none of their
// machinery (no stream, no guards, no deltas), and returns the reports whose
// stored figures differ, sorted by key. It only reads, with consistent reads;
// while consumers run, a difference can be a change still in flight (read
// again after the stream lag has passed to confirm it).
func Reconcile(ctx context.Context, api ReconcileAPI, table string, scope Scope) ([]Difference, ReconcileStats, error) {
	var stats ReconcileStats
	expected := aggregates.NewFold()
	stored := map[aggregates.ReportKey]map[string]ddbtypes.AttributeValue{}
	visit := func(item map[string]ddbtypes.AttributeValue) error {
		pk, _ := stringAttr(item, attrPK)
		sk, _ := stringAttr(item, attrSK)
		switch {
		case aggregates.IsTransactionKey(pk):
			stats.Transactions++
			tx, err := aggregates.ParseTransaction(toImage(item))
			if err != nil {
				stats.Invalid++ // contributes zero, as in the consumers
				return nil
			}
			expected.Add(tx, +1)
		case strings.HasSuffix(pk, "#REPORTING"):
			k, err := aggregates.ParseReportKey(aggregates.Key{PK: pk, SK: sk})
			if err != nil {
				return fmt.Errorf("stored report: %w", err)
			}
			stats.Reports++
			stored[k] = item
		}
		return nil
	}
	var err error
	if scope.Tenant != "" || scope.Branch != "" {
		if scope.Tenant == "" || scope.Branch == "" {
			return nil, stats, errors.New("reconcile: a scope names both tenant and branch, or neither")
		}
		for _, pk := range []string{aggregates.TransactionPK(scope.Tenant, scope.Branch), aggregates.ReportPK(scope.Tenant, scope.Branch)} {
			if err = queryAll(ctx, api, table, pk, visit); err != nil {
				break
			}
		}
	} else {
		err = scanAll(ctx, api, table, visit)
	}
	if err != nil {
		return nil, stats, fmt.Errorf("reconcile %s: %w", table, err)
	}

	keys := map[aggregates.ReportKey]bool{}
	for _, k := range expected.Keys() {
		keys[k] = true
	}
	for k := range stored {
		keys[k] = true
	}
	var diffs []Difference
	for k := range keys {
		want := expected.Report(k)
		if want == nil {
			want = &aggregates.Report{}
		}
		want.Prune()
		d := Difference{Report: k, Expected: want}
		got := &aggregates.Report{}
		if item, ok := stored[k]; ok {
			r, err := infra.DecodeReport(item)
			if err != nil {
				return nil, stats, fmt.Errorf("reconcile: report %s: %w", k, err)
			}
			got, d.Stored = r, r
			d.seen, _ = stringAttr(item, attrUpdatedAt)
		}
		if d.Lines = got.Diff(want); len(d.Lines) > 0 {
			if d.Stored == nil {
				d.Lines = append([]string{"report item missing"}, d.Lines...)
			}
			diffs = append(diffs, d)
		}
	}
	sort.Slice(diffs, func(i, j int) bool {
		a, b := diffs[i].Report.Key(), diffs[j].Report.Key()
		return a.PK < b.PK || a.PK == b.PK && a.SK < b.SK
	})
	return diffs, stats, nil
}

// Settled keeps the differences of second that are also in first with the
// same stored and expected figures: a difference that persisted unchanged
// across two reads is not a change in flight (unless one is in flight longer
// than the time between the reads).
func Settled(first, second []Difference) []Difference {
	before := map[aggregates.ReportKey]Difference{}
	for _, d := range first {
		before[d.Report] = d
	}
	var out []Difference
	for _, d := range second {
		b, ok := before[d.Report]
		if !ok || b.seen != d.seen || !sameReport(b.Stored, d.Stored) || !b.Expected.Equal(d.Expected) {
			continue
		}
		out = append(out, d)
	}
	return out
}

func sameReport(a, b *aggregates.Report) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(b)
}

// Repair overwrites each report of diffs with its expected figures, on
// condition that the stored item is still the one Reconcile read (same
// updatedAt, or still absent). A report a consumer changed meanwhile is left
// alone and reported in skipped.
func Repair(ctx context.Context, api ReconcileAPI, table string, diffs []Difference, now time.Time) (repaired int, skipped []aggregates.ReportKey, err error) {
	for _, d := range diffs {
		in := &dynamodb.PutItemInput{
			TableName: &table,
			Item:      infra.EncodeReport(d.Report, d.Expected, now.UTC().Format(time.RFC3339Nano)),
		}
		switch {
		case d.Stored == nil:
			in.ConditionExpression = aws.String("attribute_not_exists(PK)")
		case d.seen == "":
			in.ConditionExpression = aws.String("attribute_not_exists(#ua)")
			in.ExpressionAttributeNames = map[string]string{"#ua": attrUpdatedAt}
		default:
			in.ConditionExpression = aws.String("#ua = :seen")
			in.ExpressionAttributeNames = map[string]string{"#ua": attrUpdatedAt}
			in.ExpressionAttributeValues = map[string]ddbtypes.AttributeValue{":seen": strAV(d.seen)}
		}
		in.Item["repairedAt"] = in.Item[attrUpdatedAt]
		_, err := api.PutItem(ctx, in)
		var ccf *ddbtypes.ConditionalCheckFailedException
		switch {
		case errors.As(err, &ccf):
			skipped = append(skipped, d.Report)
		case err != nil:
			return repaired, skipped, fmt.Errorf("repair %s: %w", d.Report, err)
		default:
			repaired++
		}
	}
	return repaired, skipped, nil
}

func queryAll(ctx context.Context, api ReconcileAPI, table, pk string, visit func(map[string]ddbtypes.AttributeValue) error) error {
	in := &dynamodb.QueryInput{
		TableName:                 &table,
		KeyConditionExpression:    aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": strAV(pk)},
		ConsistentRead:            aws.Bool(true),
	}
	p := dynamodb.NewQueryPaginator(api, in)
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("query %s: %w", pk, err)
		}
		for _, item := range out.Items {
			if err := visit(item); err != nil {
				return err
			}
		}
	}
	return nil
}

func scanAll(ctx context.Context, api ReconcileAPI, table string, visit func(map[string]ddbtypes.AttributeValue) error) error {
	in := &dynamodb.ScanInput{
		TableName:                 &table,
		ConsistentRead:            aws.Bool(true),
		FilterExpression:          aws.String("begins_with(PK, :t)"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":t": strAV("TENANT#")},
	}
	p := dynamodb.NewScanPaginator(api, in)
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		for _, item := range out.Items {
			if err := visit(item); err != nil {
				return err
			}
		}
	}
	return nil
}
