package table

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// Reading tenant roll-ups (issue 24; docs/design.md "Tenant roll-ups",
// "Reads"). A roll-up partial (aggregates.RollupKey) is a report item in
// report.go's layout, entityType REPORT, plus one figure, the number of
// branches that contributed:
//
//	branches                               N, an integer
//
// and its entry items are report entry items (entityType REPORT_ENTRY)
// under RollupKey.EntryKey: the partial's sort key, the dimension's code,
// the name. Readers (the writer, ledgerctl) sum the RollupLanes partials of
// a currency and period; parked deltas (RollupKey.ParkedKey) are not part
// of the figures, as for branch reports.

// AttrRollupBranches is the attribute of a partial that counts the
// branches that contributed to it.
const AttrRollupBranches = "branches"

// StoredPartial is one partial roll-up as read: its item (nil when absent)
// and the entry items read with it (all of them, or one page's).
type StoredPartial struct {
	Key     aggregates.RollupKey
	Item    map[string]types.AttributeValue
	Entries []map[string]types.AttributeValue
}

// FullMap reports whether one of the partial item's inline breakdowns
// holds MaxInlineEntries names: only then may the partial have entry items
// (the consumers put a name in an entry item only beside a full map).
func (p *StoredPartial) FullMap() bool {
	for _, d := range aggregates.Dimensions {
		if m, ok := p.Item[d.Attribute()].(*types.AttributeValueMemberM); ok && len(m.Value) >= MaxInlineEntries {
			return true
		}
	}
	return false
}

// PartialEntry splits the sort key of an entry item of partial k into its
// dimension and name; ok is false for any other sort key.
func PartialEntry(k aggregates.RollupKey, sk string) (d aggregates.Dimension, name string, ok bool) {
	rest, found := strings.CutPrefix(sk, k.EntriesPrefix())
	if !found {
		return 0, "", false
	}
	code, name, found := strings.Cut(rest, "#")
	d, known := aggregates.ParseDimensionCode(code)
	if !found || !known || name == "" {
		return 0, "", false
	}
	return d, name, true
}

// Decode reads the partial's figures: the item's totals, inline entries
// and branch count, plus the entry items read with it. Like
// StoredReport.Decode it never gives up: whatever is malformed is listed
// in problems and read as zero.
func (p *StoredPartial) Decode() (r *aggregates.Report, branches int64, problems []string) {
	r = &aggregates.Report{}
	if p.Item != nil {
		head := maps.Clone(p.Item)
		delete(head, AttrRollupBranches)
		refused, other := decodeHeader(head, r)
		problems = append(append(problems, refused...), other...)
		if v, ok := p.Item[AttrRollupBranches]; ok {
			n, isN := v.(*types.AttributeValueMemberN)
			if !isN {
				problems = append(problems, AttrRollupBranches+" is not a number")
			} else if b, err := aggregates.ParseAmount(n.Value); err != nil || !b.IsInteger() {
				problems = append(problems, fmt.Sprintf("%s %s is not an integer", AttrRollupBranches, n.Value))
			} else {
				branches = b.IntPart()
			}
		}
	}
	for _, item := range p.Entries {
		sk, _ := String(item, AttrSK)
		d, name, ok := PartialEntry(p.Key, sk)
		if !ok {
			problems = append(problems, fmt.Sprintf("item %s is not an entry item of partial %s", KeyOf(item), p.Key))
			continue
		}
		where := fmt.Sprintf("entry item %s[%q]", d, name)
		problems = append(problems, checkAttrs(item, entryAttrs, aggregates.EntityReportEntry, where)...)
		t, errs := decodeTotals(item)
		for _, e := range errs {
			problems = append(problems, where+": "+e)
		}
		addEntry(r, d, name, t)
	}
	return r, branches, problems
}

// RollupSum is one roll-up summed over its partials: the figures (entries
// whose figures are all zero pruned), the branch count and the latest
// updatedAt of its partials.
type RollupSum struct {
	Tenant, Currency string
	Period           aggregates.Period
	Report           *aggregates.Report
	Branches         int64
	UpdatedAt        string
}

// ReadRollups reads the roll-ups of tenant in currency of period type pt
// from from to to (period values, inclusive; "" leaves that end open), in
// period order, with their breakdowns: one paginated Query per partial
// partition (aggregates.RollupLanes of them) over the range's sort keys,
// which returns the entry items with their partials, summed per period.
// Parked deltas are not read. A malformed partial is an error naming it
// (reconcile --repair mends it). It reads everything in the range: for
// operators (ledgerctl); the writer pages (writer/rollups.go).
func ReadRollups(ctx context.Context, api dynamodb.QueryAPIClient, tableName, tenant, currency string, pt aggregates.PeriodType, from, to string, consistent bool) ([]RollupSum, error) {
	lo, hi := string(pt)+"#", string(pt)+"#\uffff"
	if from != "" {
		lo = string(pt) + "#" + from
	}
	if to != "" {
		hi = string(pt) + "#" + to + "$" // with its entry items
	}
	parts := map[string][]*StoredPartial{} // by period sort key
	for lane := range aggregates.RollupLanes {
		pk := aggregates.RollupPK(tenant, currency, lane)
		in := &dynamodb.QueryInput{
			TableName:                &tableName,
			KeyConditionExpression:   aws.String("#pk = :pk AND #sk BETWEEN :lo AND :hi"),
			ExpressionAttributeNames: map[string]string{"#pk": AttrPK, "#sk": AttrSK},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": &types.AttributeValueMemberS{Value: pk}, ":lo": &types.AttributeValueMemberS{Value: lo}, ":hi": &types.AttributeValueMemberS{Value: hi},
			},
			ConsistentRead: aws.Bool(consistent),
		}
		var cur *StoredPartial // the partial whose entry items follow it
		p := dynamodb.NewQueryPaginator(api, in)
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				return nil, fmt.Errorf("read roll-ups of tenant %s in %s, lane %d: %w", tenant, currency, lane, err)
			}
			for _, item := range out.Items {
				sk, _ := String(item, AttrSK)
				if period, err := aggregates.ParsePeriodKey(sk); err == nil {
					cur = &StoredPartial{Key: aggregates.RollupKey{Tenant: tenant, Currency: currency, Lane: lane, Period: period}, Item: item}
					parts[sk] = append(parts[sk], cur)
					continue
				}
				if cur == nil || !strings.HasPrefix(sk, cur.Key.EntriesPrefix()) {
					return nil, fmt.Errorf("read roll-ups of tenant %s in %s: item %s is no partial and no entry item of one (ledgerctl reconcile names it)", tenant, currency, KeyOf(item))
				}
				cur.Entries = append(cur.Entries, item)
			}
		}
	}
	var out []RollupSum
	for _, sk := range slices.Sorted(maps.Keys(parts)) {
		s := RollupSum{Tenant: tenant, Currency: currency, Period: parts[sk][0].Key.Period, Report: &aggregates.Report{}}
		for _, sp := range parts[sk] {
			r, b, problems := sp.Decode()
			if len(problems) > 0 {
				return nil, fmt.Errorf("roll-up partial %s is malformed (ledgerctl reconcile --repair mends it): %s", sp.Key, strings.Join(problems, "; "))
			}
			s.Report.Merge(r)
			s.Branches += b
			if u, _ := String(sp.Item, AttrUpdatedAt); u > s.UpdatedAt {
				s.UpdatedAt = u
			}
		}
		s.Report.Prune()
		out = append(out, s)
	}
	return out, nil
}
