package table

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file is the one home of the tenant roll-ups' stored layout
// (docs/design.md "The lane layout"; the keys: aggregates/rollupkeys.go).
//
//   - A roll-up delta item, put by a commit that changed branch reports
//     (one per tenant and currency of its parts, n > 0 only past the
//     bounds below), in lane partition aggregates.RollupLanePK, sort key
//     {claim}#{currency}#{n}:
//
//     entityType   ROLLUP_DELTA
//     currency     S, the ISO code or aggregates.NoCurrency
//     periods      M of period ({TYPE}#{value}) → M of
//     totalIncome, totalExpense, transactionCount, branches   N
//     byCategory, byCostCenter, byPaymentMethod   M of name → M of the three figures (absent when empty)
//     updatedAt    S, RFC 3339, when it was put
//
//     It holds at most MaxRollupDeltaEntries breakdown entries,
//     MaxRollupDeltaPeriods periods and MaxRollupDeltaPeriodEntries entries
//     of one period (about 12 KB at most). It has no TTL:
//     the consumer that folds its INSERT record deletes it in the same
//     transaction (on attribute_exists(PK)), so an item in a lane is a
//     delta not folded yet, whatever the stream still holds.
//
//   - A roll-up partial is a report item (report.go) in its partition
//     aggregates.RollupPK, plus one figure, branches (N, an integer): the
//     change in the number of branch reports of the period whose count is
//     not zero, summed. Its entry items and parked deltas are a branch
//     report's. Its updates are a branch report's (reportupdate.go) plus
//     an additive branches.

// Bounds of one roll-up delta item. The fold of one delta record must fit
// one transaction, because a standard-mode run cannot cut a record: it
// writes at most a partial report item per period, an entry item per
// entry and the delta's delete, 32 + 64 + 1 = 97 ≤ 99 items; and a period
// holds at most MaxRollupDeltaPeriodEntries entries in one item, so that
// it is one report part (one update expression, reportupdate.go). (The
// design's first bounds, 256 entries and 64 periods, did not fit.)
const (
	MaxRollupDeltaEntries       = 64 // E_d: breakdown entries over all periods
	MaxRollupDeltaPeriods       = 32
	MaxRollupDeltaPeriodEntries = MaxInlineEntries
)

// Attribute names of roll-up items besides the report layout's (and
// AttrCurrency, transaction.go's).
const (
	AttrBranches = "branches"
	AttrPeriods  = "periods"
)

// EntityRollupDelta is the entityType of a roll-up delta item.
const EntityRollupDelta = "ROLLUP_DELTA"

var rollupPeriodAttrs = map[string]bool{
	AttrTotalIncome: true, AttrTotalExpense: true, AttrTransactionCount: true, AttrBranches: true,
	aggregates.ByCategory.Attribute(): true, aggregates.ByCostCenter.Attribute(): true, aggregates.ByPaymentMethod.Attribute(): true,
}

// SplitRollupDelta cuts one tenant and currency's deltas by period into the
// contents of its delta items, in period order and, within a period, in
// (dimension, name) order: each holds at most MaxRollupDeltaEntries entries,
// MaxRollupDeltaPeriods periods and MaxRollupDeltaPeriodEntries entries of
// one period. A period cut in two keeps its totals and branches in its
// first piece. Zero deltas are left out. It is pure, so
// a resumer cuts the same items.
func SplitRollupDelta(periods map[aggregates.Period]*aggregates.RollupDelta) []map[aggregates.Period]*aggregates.RollupDelta {
	var out []map[aggregates.Period]*aggregates.RollupDelta
	var cur map[aggregates.Period]*aggregates.RollupDelta
	entries := 0
	open := func() {
		cur = map[aggregates.Period]*aggregates.RollupDelta{}
		out = append(out, cur)
		entries = 0
	}
	for _, p := range aggregates.SortedPeriods(periods) {
		d := periods[p]
		if d == nil {
			continue
		}
		d.Prune()
		if d.IsZero() {
			continue
		}
		if cur == nil || len(cur) == MaxRollupDeltaPeriods || entries == MaxRollupDeltaEntries {
			open()
		}
		piece := &aggregates.RollupDelta{Report: aggregates.Report{Totals: d.Totals}, Branches: d.Branches}
		cur[p] = piece
		for _, dim := range aggregates.Dimensions {
			for _, name := range slices.Sorted(maps.Keys(d.Breakdowns[dim])) {
				if entries == MaxRollupDeltaEntries || piece.Entries() == MaxRollupDeltaPeriodEntries {
					open()
					piece = &aggregates.RollupDelta{}
					cur[p] = piece
				}
				if piece.Breakdowns[dim] == nil {
					piece.Breakdowns[dim] = map[string]aggregates.Totals{}
				}
				piece.Breakdowns[dim][name] = d.Breakdowns[dim][name]
				entries++
			}
		}
	}
	return out
}

// RollupDeltaItems returns the delta items of one commit (claim) for a
// tenant and currency, in lane lane: the pieces of SplitRollupDelta, the
// n-th under aggregates.RollupDeltaKey(…, n). None when every delta is zero.
func RollupDeltaItems(tenant string, lane int, claim, currency string, periods map[aggregates.Period]*aggregates.RollupDelta, now string) []map[string]types.AttributeValue {
	pieces := SplitRollupDelta(periods)
	items := make([]map[string]types.AttributeValue, len(pieces))
	for n, piece := range pieces {
		items[n] = EncodeRollupDelta(aggregates.RollupDeltaKey(tenant, lane, claim, currency, n), currency, piece, now)
	}
	return items
}

// EncodeRollupDelta returns one roll-up delta item under key k, as is:
// the caller keeps it within the bounds (SplitRollupDelta).
func EncodeRollupDelta(k aggregates.Key, currency string, periods map[aggregates.Period]*aggregates.RollupDelta, now string) map[string]types.AttributeValue {
	pm := map[string]types.AttributeValue{}
	for p, d := range periods {
		m := TotalsAV(d.Totals).Value
		m[AttrBranches] = Int(d.Branches)
		for _, dim := range aggregates.Dimensions {
			if len(d.Breakdowns[dim]) == 0 {
				continue
			}
			b := map[string]types.AttributeValue{}
			for name, t := range d.Breakdowns[dim] {
				b[name] = TotalsAV(t)
			}
			m[dim.Attribute()] = &types.AttributeValueMemberM{Value: b}
		}
		pm[p.String()] = &types.AttributeValueMemberM{Value: m}
	}
	return map[string]types.AttributeValue{
		AttrPK: S(k.PK), AttrSK: S(k.SK), AttrEntityType: S(EntityRollupDelta),
		AttrCurrency: S(currency), AttrPeriods: &types.AttributeValueMemberM{Value: pm},
		AttrUpdatedAt: S(now),
	}
}

// PutRollupDelta is the put of a roll-up delta item inside the commit that
// makes it, only if it is not there yet: a key is a claim's, written once.
func PutRollupDelta(tableName string, item map[string]types.AttributeValue) *types.Put {
	return &types.Put{TableName: aws.String(tableName), Item: item, ConditionExpression: aws.String("attribute_not_exists(PK)")}
}

// DeleteRollupDelta is the delete of a roll-up delta item inside the commit
// that folds it into the partials, only if it is still there: an item
// folded (and deleted) already is not folded again.
func DeleteRollupDelta(tableName string, k aggregates.Key) *types.Delete {
	return &types.Delete{TableName: aws.String(tableName), Key: Key(k), ConditionExpression: aws.String("attribute_exists(PK)")}
}

// RollupDeltaItem is a roll-up delta item as read (from the table or a
// stream record's new image).
type RollupDeltaItem struct {
	Key      aggregates.Key
	Tenant   string
	Lane     int
	Currency string
	Periods  map[aggregates.Period]*aggregates.RollupDelta
}

// Partials returns the partial each period of d is folded into: the
// partial of d's lane (the lane the delta sits in), tenant and currency.
func (d *RollupDeltaItem) Partials() map[aggregates.ReportKey]*aggregates.RollupDelta {
	out := make(map[aggregates.ReportKey]*aggregates.RollupDelta, len(d.Periods))
	for p, delta := range d.Periods {
		out[aggregates.RollupKey{Tenant: d.Tenant, Currency: d.Currency, Lane: d.Lane, Period: p}.Report()] = delta
	}
	return out
}

// AttrRollupDeltaFormat is a roll-up delta item's format number; absent
// for format 1.
const AttrRollupDeltaFormat = "format"

// RollupDeltaFormat is the latest roll-up delta format this version reads
// (and the one it writes, as no format attribute).
const RollupDeltaFormat = 1

// ErrNewerDeltaFormat is returned (wrapped) by DecodeRollupDelta for an
// item of a later format than RollupDeltaFormat: written by a newer
// version during a rolling deploy, for that version to fold.
var ErrNewerDeltaFormat = errors.New("roll-up delta of a newer format than this version reads")

// DecodeRollupDelta reads a roll-up delta item strictly: its key must be a
// lane key whose sort key ends in its currency and a piece number, and
// every figure must be of its type; anything else is an error naming the
// first fault (the item was not written by a consumer, and is not
// folded).
//
// A delta item's format is its attribute format, absent for format 1 (the
// items this version writes: consumers before it read them too). An item
// of a later format is refused with ErrNewerDeltaFormat before anything
// else is read (docs/exactly-once.md, "Plan layout 5", S16-3); a format
// that is no positive integer is a fault like any other.
func DecodeRollupDelta(item map[string]types.AttributeValue) (*RollupDeltaItem, error) {
	k := KeyOf(item)
	tenant, lane, ok := aggregates.ParseRollupLanePK(k.PK)
	if !ok {
		return nil, fmt.Errorf("roll-up delta %s: the partition is not a roll-up lane", k)
	}
	fail := func(format string, args ...any) (*RollupDeltaItem, error) {
		return nil, fmt.Errorf("roll-up delta %s: %s", k, fmt.Sprintf(format, args...))
	}
	if v, present := item[AttrRollupDeltaFormat]; present {
		f, ok := Int64(item, AttrRollupDeltaFormat)
		if !ok || f < 1 {
			return fail("%s %v is not a format number", AttrRollupDeltaFormat, v)
		}
		if f > RollupDeltaFormat {
			return nil, fmt.Errorf("roll-up delta %s: format %d, this version reads formats up to %d: %w", k, f, RollupDeltaFormat, ErrNewerDeltaFormat)
		}
	}
	if et, _ := String(item, AttrEntityType); et != EntityRollupDelta {
		return fail("%s is not %q", AttrEntityType, EntityRollupDelta)
	}
	cur, ok := String(item, AttrCurrency)
	if !ok || aggregates.ValidateRollupCurrency(cur) != nil {
		return fail("%s is not a currency code or %q", AttrCurrency, aggregates.NoCurrency)
	}
	rest, n, found := cutLast(k.SK, "#")
	if _, err := strconv.Atoi(n); !found || err != nil || !strings.HasSuffix(rest, "#"+cur) || len(rest) == len(cur)+1 {
		return fail("the sort key is not {claim}#%s#{n}", cur)
	}
	pm, ok := item[AttrPeriods].(*types.AttributeValueMemberM)
	if !ok {
		return fail("%s is not a map", AttrPeriods)
	}
	if len(pm.Value) > MaxRollupDeltaPeriods {
		return fail("%d periods, more than %d", len(pm.Value), MaxRollupDeltaPeriods)
	}
	out := &RollupDeltaItem{Key: k, Tenant: tenant, Lane: lane, Currency: cur, Periods: map[aggregates.Period]*aggregates.RollupDelta{}}
	entries := 0
	for _, ps := range slices.Sorted(maps.Keys(pm.Value)) {
		p, err := aggregates.ParsePeriodKey(ps)
		if err != nil {
			return fail("period %q: %v", ps, err)
		}
		m, ok := pm.Value[ps].(*types.AttributeValueMemberM)
		if !ok {
			return fail("period %s is not a map", ps)
		}
		for _, a := range slices.Sorted(maps.Keys(m.Value)) {
			if !rollupPeriodAttrs[a] {
				return fail("period %s: unknown attribute %q", ps, a)
			}
		}
		d := &aggregates.RollupDelta{}
		refused, _ := decodeHeader(m.Value, &d.Report)
		if len(refused) > 0 {
			return fail("period %s: %s", ps, refused[0])
		}
		if v, present := m.Value[AttrBranches]; present {
			b, ok := Int64(m.Value, AttrBranches)
			if !ok {
				return fail("period %s: %s %v is not an integer", ps, AttrBranches, v)
			}
			d.Branches = b
		}
		if d.Entries() > MaxRollupDeltaPeriodEntries {
			return fail("period %s: %d breakdown entries, more than %d", ps, d.Entries(), MaxRollupDeltaPeriodEntries)
		}
		entries += d.Entries()
		out.Periods[p] = d
	}
	if entries > MaxRollupDeltaEntries {
		return fail("%d breakdown entries, more than %d", entries, MaxRollupDeltaEntries)
	}
	return out, nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// AttrParkedRollup marks a branch report's parked delta as also the
// roll-up's share of it: M of currency (the roll-up's, ISO code or
// aggregates.NoCurrency). The share is the parked delta itself; its branch
// transition is unknown (the count never moved), so repair recounts
// branches.
const AttrParkedRollup = "rollup"

// WithRollupShare marks a parked item (ParkedItem) as the roll-up share of
// currency.
func WithRollupShare(item map[string]types.AttributeValue, currency string) {
	item[AttrParkedRollup] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{AttrCurrency: S(currency)}}
}

// WithParkedBranches records on a partial's parked delta (ParkedItem) what
// its part 0 adds to the partial's branches (AttrBranches, N), when not
// zero: the parked delta holds the report's figures only, so without it a
// parked partial part would lose its branch transitions, and "Σ partials
// + lane items + parked = the fold" would fail for branches
// (docs/exactly-once.md, "Tenant roll-ups", review of session 16, hole
// S16-2).
func WithParkedBranches(item map[string]types.AttributeValue, branches int64) {
	if branches != 0 {
		item[AttrBranches] = Int(branches)
	}
}

// ParkedBranches reads what a parked delta adds to a partial's branches
// (WithParkedBranches): 0 when absent (a branch report's parked delta, or
// a partial's parked before session 16); an error when it is no integer.
func ParkedBranches(item map[string]types.AttributeValue) (int64, error) {
	if _, present := item[AttrBranches]; !present {
		return 0, nil
	}
	n, ok := Int64(item, AttrBranches)
	if !ok {
		return 0, fmt.Errorf("parked delta %s: %s is not an integer", KeyOf(item), AttrBranches)
	}
	return n, nil
}

// RollupShare reads a parked item's roll-up share: its currency, ok false
// when the item carries none (a partial's parked delta, or one parked
// before roll-ups).
func RollupShare(item map[string]types.AttributeValue) (currency string, ok bool) {
	m, isM := item[AttrParkedRollup].(*types.AttributeValueMemberM)
	if !isM {
		return "", false
	}
	return String(m.Value, AttrCurrency)
}

// DecodeRollup reads a partial's figures: the report's (Decode) and
// branches, whose problems (not an integer) are listed with the report's.
// On a branch report it reads the report and Branches 0.
func (s *StoredReport) DecodeRollup() (*aggregates.RollupDelta, []string) {
	r, problems := s.Decode()
	out := &aggregates.RollupDelta{Report: *r}
	if v, present := s.Item[AttrBranches]; present {
		n, isN := v.(*types.AttributeValueMemberN)
		b, ok := Int64(s.Item, AttrBranches)
		switch {
		case !isN:
			problems = append(problems, AttrBranches+" is not a number")
		case !ok:
			problems = append(problems, fmt.Sprintf("%s %s is not an integer", AttrBranches, n.Value))
		default:
			out.Branches = b
		}
	}
	return out, problems
}

// EncodePartial returns the items of a partial with figures d as a repair
// writes them (EncodeReport, plus branches).
func EncodePartial(k aggregates.RollupKey, d *aggregates.RollupDelta, updatedAt string) (item map[string]types.AttributeValue, entries []map[string]types.AttributeValue) {
	item, entries = EncodeReport(k.Report(), &d.Report, updatedAt)
	item[AttrBranches] = Int(d.Branches)
	return item, entries
}
