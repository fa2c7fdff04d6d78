package table

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file is the one home of the report's stored layout: the stream
// consumers write it (processor: an UpdateItem of these attributes for a
// commit, EncodeReport for a repair), the writer, ledgerctl and the tests
// read it with StoredReport.Decode. A report lives in its branch's report
// partition (aggregates.ReportKey) as
//
//   - the report item, under the period's sort key:
//
//     entityType                             REPORT
//     periodType, periodValue                S, the period
//     totalIncome, totalExpense              N, exact decimals
//     transactionCount                       N, an integer; or, in the
//                                            fenced layout of protocol 4,
//                                            the string "v4" (HeadFence)
//     txCount                                N, the count of a fenced head
//                                            only (AttrTxCount)
//     updatedAt                              S, RFC 3339, the last commit
//     byCategory, byCostCenter, byPaymentMethod
//     M of name → M of the three figures, at most MaxInlineEntries names each
//
//   - one entry item per breakdown name that did not fit its inline map
//     (ReportKey.EntryKey: the period's sort key, the dimension's code, the
//     name), sorted right after the report item:
//
//     entityType                             REPORT_ENTRY
//     totalIncome, totalExpense, transactionCount
//
//   - parked deltas (ReportKey.ParkedKey, ParkedItem), which are not part
//     of the figures: deltas DynamoDB refused for good, kept for
//     reconcile --repair.
//
// An entry's figures are the sum of its inline entry and its entry item:
// the consumers put a name inline while the map has room (a condition on
// the map's size keeps it at MaxInlineEntries) and in an entry item once it
// is full, so a name is normally in one place, and a reader that sums both
// is right whichever it is. Names are at most aggregates.MaxNameLength
// characters (longer ones are quarantined), so the report item stays under
// MaxReportItemBytes and no write can reach DynamoDB's 400 KB item limit.
//
// A breakdown or a figure may be absent (an empty map decodes badly from
// DynamoDB Local's stream): it reads as zero.

// MaxInlineEntries bounds the breakdown entries a report item holds inline
// per dimension; further names go to entry items.
const MaxInlineEntries = 32

// MaxReportItemBytes bounds the size of a report item the consumers write:
// the header attributes plus 3 × MaxInlineEntries entries of names of
// aggregates.MaxNameLength four-byte characters and figures of 38 digits.
const MaxReportItemBytes = 40 << 10

// Attribute names of report items besides the keys. entityType and
// updatedAt (attr.go) are on every report item the consumers write.
const (
	AttrPeriodType       = "periodType"
	AttrPeriodValue      = "periodValue"
	AttrTotalIncome      = "totalIncome"
	AttrTotalExpense     = "totalExpense"
	AttrTransactionCount = "transactionCount"
	AttrRepairedAt       = "repairedAt"
	// AttrTxCount holds a fenced head's transaction count: in the layout of
	// protocol 4 (docs/exactly-once.md, "The design: counted changes", F.
	// The fence) a report item's count moves to txCount and its
	// transactionCount becomes the string HeadFence, so that an additive
	// update of the previous protocol (if_not_exists(#n, :z) + :n) is a
	// ValidationException. This version (protocol 4, step F) reads both
	// layouts; every consumer update leaves the head fenced
	// (ReportUpdateWith), and a repair writes a head in the layout it read
	// (EncodeRepair).
	AttrTxCount = "txCount"
)

// HeadFence is the transactionCount of a fenced report item (AttrTxCount).
const HeadFence = "v4"

// FencedHead reports whether item is a report item in the fenced layout:
// transactionCount is the string HeadFence. Its count is txCount (absent:
// zero). Any other string is no layout this version knows: a malformation.
func FencedHead(item map[string]types.AttributeValue) bool {
	v, ok := item[AttrTransactionCount].(*types.AttributeValueMemberS)
	return ok && v.Value == HeadFence
}

// HeadCount is a report item's count in either layout: transactionCount,
// or a fenced head's txCount (0 when absent); ok is false when it is no
// integer.
func HeadCount(item map[string]types.AttributeValue) (n int64, ok bool) {
	a := AttrTransactionCount
	if FencedHead(item) {
		a = AttrTxCount
	}
	if _, present := item[a]; !present {
		return 0, true
	}
	return Int64(item, a)
}

// reportAttrs and entryAttrs are the attributes each item may hold; any
// other is a malformation reconcile names and repairs.
var (
	reportAttrs = map[string]bool{
		AttrPK: true, AttrSK: true, AttrEntityType: true, AttrPeriodType: true, AttrPeriodValue: true,
		AttrTotalIncome: true, AttrTotalExpense: true, AttrTransactionCount: true, AttrUpdatedAt: true, AttrRepairedAt: true,
		aggregates.ByCategory.Attribute(): true, aggregates.ByCostCenter.Attribute(): true, aggregates.ByPaymentMethod.Attribute(): true,
	}
	// A branch report also holds the currency of its transactions (set by
	// its first update, rollup.go); a roll-up partial holds branches.
	branchReportAttrs = with(reportAttrs, AttrCurrency)
	partialAttrs      = with(reportAttrs, AttrBranches)
	entryAttrs        = map[string]bool{
		AttrPK: true, AttrSK: true, AttrEntityType: true,
		AttrTotalIncome: true, AttrTotalExpense: true, AttrTransactionCount: true,
	}
)

// StoredReport is a report as read from its partition: the report item,
// its entry items and its parked deltas.
type StoredReport struct {
	Key     aggregates.ReportKey
	Item    map[string]types.AttributeValue   // the report item; nil when absent
	Entries []map[string]types.AttributeValue // entry items, in any order
	Parked  []map[string]types.AttributeValue // parked deltas
}

// Exists reports whether the report has any item of figures.
func (s *StoredReport) Exists() bool { return s.Item != nil || len(s.Entries) > 0 }

// UpdatedAt is the report item's updatedAt ("" when absent).
func (s *StoredReport) UpdatedAt() string {
	v, _ := s.Item[AttrUpdatedAt].(*types.AttributeValueMemberS)
	if v == nil {
		return ""
	}
	return v.Value
}

// Decode reads the report's figures: the report item's totals and inline
// entries plus its entry items. It never gives up: whatever is malformed
// (a figure of the wrong type, a map that is not one, an unknown attribute,
// too many inline entries, an oversized item, entries without a report
// item) is listed in problems and read as zero, so one damaged item is a
// difference to repair, not a failure of the whole read.
func (s *StoredReport) Decode() (r *aggregates.Report, problems []string) {
	r = &aggregates.Report{}
	if s.Item == nil && len(s.Entries) > 0 {
		problems = append(problems, fmt.Sprintf("%d entry items without a report item", len(s.Entries)))
	}
	if s.Item != nil {
		refused, other := decodeHeader(s.Item, r)
		problems = append(append(problems, refused...), other...)
	}
	for _, item := range s.Entries {
		ref, err := refOf(item)
		if err != nil || ref.Kind != aggregates.ReportEntry || ref.Report != s.Key {
			problems = append(problems, fmt.Sprintf("item %s is not an entry item of %s", KeyOf(item), s.Key))
			continue
		}
		where := fmt.Sprintf("entry item %s[%q]", ref.Dim, ref.Name)
		problems = append(problems, checkAttrs(item, entryAttrs, aggregates.EntityReportEntry, where)...)
		t, errs := decodeTotals(item)
		for _, e := range errs {
			problems = append(problems, where+": "+e)
		}
		addEntry(r, ref.Dim, ref.Name, t)
	}
	return r, problems
}

// decodeHeader reads a report item's figures into r. refused lists what
// makes DynamoDB refuse an additive update of the item (a figure or map of
// the wrong type, a size past MaxReportItemBytes); other what is only
// malformed (unknown attributes, a wrong entityType, too many inline
// entries). Whatever cannot be read counts as zero.
func decodeHeader(item map[string]types.AttributeValue, r *aggregates.Report) (refused, other []string) {
	other = checkAttrs(item, headerAttrs(item), aggregates.EntityReport, "report item")
	if n := ItemSize(item); n > MaxReportItemBytes {
		refused = append(refused, fmt.Sprintf("report item of %d bytes, more than %d", n, MaxReportItemBytes))
	}
	// A fenced head (protocol 4) holds its count in txCount.
	count := AttrTransactionCount
	if FencedHead(item) {
		count = AttrTxCount
	}
	t, errs := decodeTotalsCounted(item, count)
	refused = append(refused, errs...)
	r.Totals = t
	for _, d := range aggregates.Dimensions {
		v, ok := item[d.Attribute()]
		if !ok {
			continue
		}
		m, ok := v.(*types.AttributeValueMemberM)
		if !ok {
			refused = append(refused, fmt.Sprintf("%s is not a map", d))
			continue
		}
		if len(m.Value) > MaxInlineEntries {
			other = append(other, fmt.Sprintf("%s holds %d entries inline, more than %d", d, len(m.Value), MaxInlineEntries))
		}
		for _, name := range slices.Sorted(maps.Keys(m.Value)) {
			em, ok := m.Value[name].(*types.AttributeValueMemberM)
			if !ok {
				refused = append(refused, fmt.Sprintf("%s[%q] is not a map", d, name))
				continue
			}
			t, errs := decodeTotals(em.Value)
			for _, e := range errs {
				refused = append(refused, fmt.Sprintf("%s[%q]: %s", d, name, e))
			}
			for _, f := range []string{AttrTotalIncome, AttrTotalExpense, AttrTransactionCount} {
				if _, ok := em.Value[f]; !ok {
					// An update adds to the inline entry's figures in place.
					refused = append(refused, fmt.Sprintf("%s[%q] lacks %s", d, name, f))
				}
			}
			addEntry(r, d, name, t)
		}
	}
	return refused, other
}

func with(set map[string]bool, more ...string) map[string]bool {
	out := maps.Clone(set)
	for _, a := range more {
		out[a] = true
	}
	return out
}

// headerAttrs is the attribute set of a report item: a partial's when its
// partition is a roll-up's; with txCount when the item is fenced
// (FencedHead), and only then.
func headerAttrs(item map[string]types.AttributeValue) map[string]bool {
	pk, _ := String(item, AttrPK)
	attrs := branchReportAttrs
	if aggregates.IsRollupPK(pk) {
		attrs = partialAttrs
	}
	if FencedHead(item) {
		return with(attrs, AttrTxCount)
	}
	return attrs
}

func checkAttrs(item map[string]types.AttributeValue, allowed map[string]bool, entity, where string) (problems []string) {
	if et, ok := item[AttrEntityType].(*types.AttributeValueMemberS); !ok || et.Value != entity {
		problems = append(problems, fmt.Sprintf("%s: %s is not %q", where, AttrEntityType, entity))
	}
	for _, a := range slices.Sorted(maps.Keys(item)) {
		if !allowed[a] {
			problems = append(problems, fmt.Sprintf("%s: unknown attribute %q", where, a))
		}
	}
	return problems
}

func addEntry(r *aggregates.Report, d aggregates.Dimension, name string, t aggregates.Totals) {
	if r.Breakdowns[d] == nil {
		r.Breakdowns[d] = map[string]aggregates.Totals{}
	}
	r.Breakdowns[d][name] = r.Breakdowns[d][name].Add(t)
}

// decodeTotals reads the three figures of m; a missing one is zero, a
// malformed one is zero and named in problems.
func decodeTotals(m map[string]types.AttributeValue) (t aggregates.Totals, problems []string) {
	return decodeTotalsCounted(m, AttrTransactionCount)
}

// decodeTotalsCounted is decodeTotals with the count read from the
// attribute count.
func decodeTotalsCounted(m map[string]types.AttributeValue, count string) (t aggregates.Totals, problems []string) {
	var err error
	if t.Income, err = decimalAttr(m, AttrTotalIncome); err != nil {
		problems = append(problems, err.Error())
	}
	if t.Expense, err = decimalAttr(m, AttrTotalExpense); err != nil {
		problems = append(problems, err.Error())
	}
	n, err := decimalAttr(m, count)
	switch {
	case err != nil:
		problems = append(problems, err.Error())
	case !n.IsInteger():
		problems = append(problems, fmt.Sprintf("%s %s is not an integer", count, n))
	default:
		t.Count = n.IntPart()
	}
	return t, problems
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

// CheckReportItem lists what makes a stored report or entry item one that
// a consumer's update would be refused on (wrong types, a map that is not
// one, an item too large to grow): the items a commit parks its delta for
// instead. Unknown attributes and too many inline entries are not listed:
// updates still succeed on them. A fenced head (FencedHead) is not listed
// since step F: this version's update adds to its txCount
// (docs/exactly-once.md, "F as built (session 25)"); a txCount that is no
// integer is.
func CheckReportItem(item map[string]types.AttributeValue) []string {
	if item == nil {
		return nil
	}
	refused, _ := decodeHeader(item, &aggregates.Report{})
	return refused
}

// EncodeReport returns the items of a report with figures r as a repair
// writes them: the report item, with the first MaxInlineEntries names of
// each dimension (in name order) inline, and an entry item for each
// further name. Empty breakdowns and zero entries are left out.
func EncodeReport(k aggregates.ReportKey, r *aggregates.Report, updatedAt string) (item map[string]types.AttributeValue, entries []map[string]types.AttributeValue) {
	key := k.Key()
	item = map[string]types.AttributeValue{
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
		var names []string
		for _, name := range slices.Sorted(maps.Keys(r.Breakdowns[d])) {
			if !r.Breakdowns[d][name].IsZero() {
				names = append(names, name)
			}
		}
		if len(names) == 0 {
			continue
		}
		m := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
		for i, name := range names {
			if i < MaxInlineEntries {
				m.Value[name] = TotalsAV(r.Breakdowns[d][name])
				continue
			}
			entries = append(entries, EncodeEntry(k, d, name, r.Breakdowns[d][name]))
		}
		item[d.Attribute()] = m
	}
	return item, entries
}

// EncodeEntry returns the entry item of name in dimension d of report k.
func EncodeEntry(k aggregates.ReportKey, d aggregates.Dimension, name string, t aggregates.Totals) map[string]types.AttributeValue {
	key := k.EntryKey(d, name)
	item := TotalsAV(t).Value
	item[AttrPK] = &types.AttributeValueMemberS{Value: key.PK}
	item[AttrSK] = &types.AttributeValueMemberS{Value: key.SK}
	item[AttrEntityType] = &types.AttributeValueMemberS{Value: aggregates.EntityReportEntry}
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

// ReportSet groups items of report partitions by report.
type ReportSet map[aggregates.ReportKey]*StoredReport

// Add files item under its report. It returns an error for an item of a
// report partition whose key is no report, entry or parked delta.
func (s ReportSet) Add(item map[string]types.AttributeValue) error {
	ref, err := refOf(item)
	if err != nil {
		return err
	}
	sr := s[ref.Report]
	if sr == nil {
		sr = &StoredReport{Key: ref.Report}
		s[ref.Report] = sr
	}
	switch ref.Kind {
	case aggregates.ReportHeader:
		sr.Item = item
	case aggregates.ReportEntry:
		sr.Entries = append(sr.Entries, item)
	case aggregates.ReportParked:
		sr.Parked = append(sr.Parked, item)
	}
	return nil
}

// Keys returns the reports of the set in key order.
func (s ReportSet) Keys() []aggregates.ReportKey {
	return slices.SortedFunc(maps.Keys(s), func(a, b aggregates.ReportKey) int {
		ka, kb := a.Key(), b.Key()
		if ka.PK != kb.PK {
			return cmpString(ka.PK, kb.PK)
		}
		return cmpString(ka.SK, kb.SK)
	})
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func refOf(item map[string]types.AttributeValue) (aggregates.ReportItemRef, error) {
	return aggregates.ParseReportItemKey(KeyOf(item))
}

// ReadReport reads report k with its entry items (not its parked deltas):
// one Query on the report's sort key prefix, paginated, consistent when
// asked. A report without any item comes back with Exists false.
func ReadReport(ctx context.Context, api dynamodb.QueryAPIClient, table string, k aggregates.ReportKey, consistent bool) (*StoredReport, error) {
	key := k.Key()
	in := &dynamodb.QueryInput{
		TableName:                 &table,
		KeyConditionExpression:    aws.String("#pk = :pk AND begins_with(#sk, :p)"),
		ExpressionAttributeNames:  map[string]string{"#pk": AttrPK, "#sk": AttrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: key.PK}, ":p": &types.AttributeValueMemberS{Value: key.SK}},
		ConsistentRead:            aws.Bool(consistent),
	}
	set := ReportSet{}
	p := dynamodb.NewQueryPaginator(api, in)
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("read report %s: %w", k, err)
		}
		for _, item := range out.Items {
			if err := set.Add(item); err != nil {
				return nil, fmt.Errorf("read report %s: %w", k, err)
			}
		}
	}
	if sr := set[k]; sr != nil {
		return sr, nil
	}
	return &StoredReport{Key: k}, nil
}

// ParkedInfo describes a parked delta: why it was parked and the records
// (by sequence number) of the commit that parked it.
type ParkedInfo struct {
	Reason, Detail string
	From, To       string // the commit's first and last sequence numbers
	ParkedAt       string // RFC 3339
}

// Attribute names of parked deltas besides the report layout's.
const (
	AttrParkedReason = "reason"
	AttrParkedDetail = "detail"
	AttrParkedFrom   = "recordsFrom"
	AttrParkedTo     = "recordsTo"
	AttrParkedAt     = "parkedAt"
	AttrParkedReport = "report"
	AttrParkedDelta  = "delta"
)

// maxParkedDetail bounds the stored detail of a parked delta.
const maxParkedDetail = 2048

// ParkedItem is the item of a delta of report k parked by the commit named
// id (aggregates.ReportKey.ParkedKey): the delta in the report item's own
// layout (all entries inline: a part holds few), why, and which records.
// It is listed through GSI1 (ParkedIndexPK) by ledgerctl parked and
// deleted by reconcile --repair once the report is rebuilt.
func ParkedItem(k aggregates.ReportKey, id string, delta *aggregates.Report, info ParkedInfo) map[string]types.AttributeValue {
	key := k.ParkedKey(id)
	d := &types.AttributeValueMemberM{Value: TotalsAV(delta.Totals).Value}
	for _, dim := range aggregates.Dimensions {
		if len(delta.Breakdowns[dim]) == 0 {
			continue
		}
		m := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
		for name, t := range delta.Breakdowns[dim] {
			m.Value[name] = TotalsAV(t)
		}
		d.Value[dim.Attribute()] = m
	}
	detail := info.Detail
	if len(detail) > maxParkedDetail {
		detail = detail[:maxParkedDetail] + "…"
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	return map[string]types.AttributeValue{
		AttrPK: s(key.PK), AttrSK: s(key.SK), AttrEntityType: s(aggregates.EntityParked),
		AttrGSI1PK: s(aggregates.ParkedIndexPK), AttrGSI1SK: s(info.ParkedAt + "#" + key.SK),
		AttrParkedReport: s(k.Key().SK), AttrParkedDelta: d,
		AttrParkedReason: s(info.Reason), AttrParkedDetail: s(detail),
		AttrParkedFrom: s(info.From), AttrParkedTo: s(info.To), AttrParkedAt: s(info.ParkedAt),
	}
}

// PutParked is the put of a parked delta (ParkedItem) inside its commit,
// only if it is not there yet.
func PutParked(tableName string, item map[string]types.AttributeValue) *types.Put {
	return &types.Put{TableName: aws.String(tableName), Item: item, ConditionExpression: aws.String("attribute_not_exists(PK)")}
}

// DecodeParked reads a parked item's delta and description.
func DecodeParked(item map[string]types.AttributeValue) (*aggregates.Report, ParkedInfo, error) {
	str := func(a string) string {
		v, _ := item[a].(*types.AttributeValueMemberS)
		if v == nil {
			return ""
		}
		return v.Value
	}
	info := ParkedInfo{Reason: str(AttrParkedReason), Detail: str(AttrParkedDetail), From: str(AttrParkedFrom), To: str(AttrParkedTo), ParkedAt: str(AttrParkedAt)}
	m, ok := item[AttrParkedDelta].(*types.AttributeValueMemberM)
	if !ok {
		return nil, info, fmt.Errorf("parked delta %s: no delta map", KeyOf(item))
	}
	r := &aggregates.Report{}
	if refused, _ := decodeHeader(m.Value, r); len(refused) > 0 {
		return nil, info, fmt.Errorf("parked delta %s: %s", KeyOf(item), refused[0])
	}
	return r, info, nil
}

// RepairItems are the writes that make a stored report equal to figures:
// the report item, entry items to put (Moved: of names the stored item held
// inline; Entries: the others) and entry items to delete (of names now
// inline).
type RepairItems struct {
	Item           map[string]types.AttributeValue
	Moved, Entries []map[string]types.AttributeValue
	Deletes        []aggregates.Key
}

// EncodeRepair returns the writes that rewrite stored (which may be empty,
// damaged or in another placement) as a report with figures r. It keeps the
// layout's invariant that entry items exist only beside a full inline map,
// so a consumer never puts a name inline that has an entry item: the names
// of a dimension (r's, and every name stored) are inline if they fit, else
// the map is filled to MaxInlineEntries, names already inline first (a
// damaged map's in name order), then the others in name order, and the rest
// are entry items. A name that changes place is safe against consumers
// whose shape is stale: an increment inline requires the name inline, a
// write to an entry item requires it not inline (processor/commit.go).
// Stored names r lacks are kept at zero. An entry item of a name now inline
// is deleted. A report item read fenced (FencedHead) is written fenced: its
// count in txCount, transactionCount the fence (docs/exactly-once.md,
// second review, F-b: a repair of this version does not undo the fence).
func EncodeRepair(k aggregates.ReportKey, r *aggregates.Report, stored *StoredReport, updatedAt string) RepairItems {
	var out RepairItems
	item, _ := EncodeReport(k, &aggregates.Report{Totals: r.Totals}, updatedAt)
	if stored != nil && FencedHead(stored.Item) {
		item[AttrTxCount] = item[AttrTransactionCount]
		item[AttrTransactionCount] = S(HeadFence)
	}
	out.Item = item
	for _, d := range aggregates.Dimensions {
		all := map[string]bool{}
		var first []string // names inline now, in name order
		if stored != nil {
			if m, ok := stored.Item[d.Attribute()].(*types.AttributeValueMemberM); ok {
				first = slices.Sorted(maps.Keys(m.Value))
			}
			for _, e := range stored.Entries {
				if ref, err := refOf(e); err == nil && ref.Kind == aggregates.ReportEntry && ref.Dim == d {
					all[ref.Name] = true
				}
			}
		}
		for _, name := range first {
			all[name] = true
		}
		for name, t := range r.Breakdowns[d] {
			if !t.IsZero() {
				all[name] = true
			}
		}
		if len(all) == 0 {
			continue
		}
		inline := map[string]bool{}
		for _, name := range append(first, slices.Sorted(maps.Keys(all))...) {
			if len(inline) == MaxInlineEntries {
				break
			}
			inline[name] = true
		}
		m := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
		for name := range inline {
			m.Value[name] = TotalsAV(r.Breakdowns[d][name])
		}
		out.Item[d.Attribute()] = m
		wasInline := map[string]bool{}
		for _, name := range first {
			wasInline[name] = true
		}
		for _, name := range slices.Sorted(maps.Keys(all)) {
			switch {
			case inline[name]:
			case wasInline[name]:
				out.Moved = append(out.Moved, EncodeEntry(k, d, name, r.Breakdowns[d][name]))
			default:
				out.Entries = append(out.Entries, EncodeEntry(k, d, name, r.Breakdowns[d][name]))
			}
		}
		if stored != nil {
			for _, e := range stored.Entries {
				if ref, err := refOf(e); err == nil && ref.Kind == aggregates.ReportEntry && ref.Dim == d && inline[ref.Name] {
					out.Deletes = append(out.Deletes, k.EntryKey(d, ref.Name))
				}
			}
		}
	}
	slices.SortFunc(out.Deletes, func(a, b aggregates.Key) int { return cmpString(a.SK, b.SK) })
	return out
}

// ReportAbsent is the transaction action that requires report k to have no
// report item.
func ReportAbsent(tableName string, k aggregates.ReportKey) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(tableName), Key: Key(k.Key()), ConditionExpression: aws.String("attribute_not_exists(PK)"),
	}}
}

// RepairHead is the put of a repaired report item (EncodeRepair's Item,
// which it stamps with repairedAt = its updatedAt), conditioned on the item
// as the repair read it: absent (hasItem false), present without updatedAt
// (seen nil), or with updatedAt seen; and, when present, in the layout it
// read, which is item's (EncodeRepair writes a head read fenced fenced): a
// head fenced since the read, by an update that keeps updatedAt (protocol
// 4's fence of an old-layout head), is not put back in the old layout
// (docs/exactly-once.md, review of session 25, S25-X1). A consumer's
// commit in between makes it fail.
func RepairHead(tableName string, item map[string]types.AttributeValue, hasItem bool, seen types.AttributeValue) types.TransactWriteItem {
	item[AttrRepairedAt] = item[AttrUpdatedAt]
	head := &types.Put{TableName: aws.String(tableName), Item: item}
	switch {
	case !hasItem:
		head.ConditionExpression = aws.String("attribute_not_exists(PK)")
	case seen == nil:
		head.ConditionExpression = aws.String("attribute_exists(PK) AND attribute_not_exists(#ua)")
		head.ExpressionAttributeNames = map[string]string{"#ua": AttrUpdatedAt}
	default:
		head.ConditionExpression = aws.String("#ua = :seen")
		head.ExpressionAttributeNames = map[string]string{"#ua": AttrUpdatedAt}
		head.ExpressionAttributeValues = map[string]types.AttributeValue{":seen": seen}
	}
	if hasItem {
		// The layout read: fenced, or not (a numeric count, none, or a
		// damaged one, which the repair mends).
		layout := " AND #n = :fence"
		if !FencedHead(item) {
			layout = " AND (attribute_not_exists(#n) OR #n <> :fence)"
		}
		head.ConditionExpression = aws.String(*head.ConditionExpression + layout)
		head.ExpressionAttributeNames["#n"] = AttrTransactionCount
		if head.ExpressionAttributeValues == nil {
			head.ExpressionAttributeValues = map[string]types.AttributeValue{}
		}
		head.ExpressionAttributeValues[":fence"] = S(HeadFence)
	}
	return types.TransactWriteItem{Put: head}
}

// RepairGuard is the transaction action every later transaction of a
// repair stamped stamp requires: report k's item still as RepairHead wrote
// it (no consumer committed to it since).
func RepairGuard(tableName string, k aggregates.ReportKey, stamp string) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(tableName), Key: Key(k.Key()),
		ConditionExpression:       aws.String("#ra = :stamp AND #ua = :stamp"),
		ExpressionAttributeNames:  map[string]string{"#ra": AttrRepairedAt, "#ua": AttrUpdatedAt},
		ExpressionAttributeValues: map[string]types.AttributeValue{":stamp": S(stamp)},
	}}
}
