package table

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file holds the consumers' writes of the report layout (report.go):
// the additive update of a report item and of its entry items inside a
// commit, with the conditions that keep a name in one place.

// Placeholders of report updates. Short names keep expressions far from
// DynamoDB's 4 KB limit.
var reportNames = map[string]string{
	"#i": AttrTotalIncome, "#x": AttrTotalExpense, "#n": AttrTransactionCount,
	"#et": AttrEntityType, "#pt": AttrPeriodType, "#pv": AttrPeriodValue, "#ua": AttrUpdatedAt,
	"#b0": aggregates.ByCategory.Attribute(), "#b1": aggregates.ByCostCenter.Attribute(), "#b2": aggregates.ByPaymentMethod.Attribute(),
	"#br": AttrBranches, "#cur": AttrCurrency,
}

const maxExpression = 4096

// ReportShape is what a consumer knows of a stored report item's
// breakdown maps, per dimension: whether the attribute is present, and the
// names of the map (nil when the attribute is not a map); and, for the
// tenant roll-ups (docs/design.md "The number of branches that
// contributed"), its count and currency as read.
type ReportShape struct {
	Present [3]bool
	Entries [3]map[string]bool
	// Count is transactionCount as read (0 when absent); CountDamaged says
	// it is there but no integer: an update conditioned on the count can
	// never succeed on it.
	Count        int64
	CountDamaged bool
	// CountFenced says the count is protocol 4's fence (FencedHead): it is
	// damaged for this version's updates, and a part parked on it names
	// the fence (FenceRefusal; review of session 25, S25-X5).
	CountFenced bool
	// Currency is the branch report's currency as read ("" when absent);
	// CurrencyDamaged says it is there but not a string.
	Currency        string
	CurrencyDamaged bool
	// UpdatedAt is updatedAt as read ("" when absent or not a string):
	// every commit sets it, so two reads that find it equal (and set) read
	// an item no commit changed in between, where equal figures alone may
	// be a change and its reversal (docs/exactly-once.md, "Tenant
	// roll-ups", review of session 16, hole S16-1).
	UpdatedAt string
}

// ReportShapeAttributes are the attributes DecodeReportShape reads: a
// projection of them is all a consumer needs to read of a report item.
func ReportShapeAttributes() []string {
	out := make([]string, 0, len(aggregates.Dimensions)+3)
	for _, d := range aggregates.Dimensions {
		out = append(out, d.Attribute())
	}
	return append(out, AttrTransactionCount, AttrCurrency, AttrUpdatedAt)
}

// DecodeReportShape reads the shape of a stored report item (nil: absent,
// which has no maps and a count of 0).
func DecodeReportShape(item map[string]types.AttributeValue) ReportShape {
	var s ReportShape
	if _, present := item[AttrTransactionCount]; present {
		n, ok := Int64(item, AttrTransactionCount)
		s.Count, s.CountDamaged = n, !ok
		s.CountFenced = FencedHead(item)
	}
	if v, present := item[AttrCurrency]; present {
		c, ok := v.(*types.AttributeValueMemberS)
		if ok {
			s.Currency = c.Value
		}
		s.CurrencyDamaged = !ok
	}
	s.UpdatedAt, _ = String(item, AttrUpdatedAt)
	for _, d := range aggregates.Dimensions {
		v, ok := item[d.Attribute()]
		if !ok {
			continue
		}
		s.Present[d] = true
		if m, ok := v.(*types.AttributeValueMemberM); ok {
			s.Entries[d] = make(map[string]bool, len(m.Value))
			for n := range m.Value {
				s.Entries[d][n] = true
			}
		}
	}
	return s
}

// InlineRoom is how many more names the report item's map of dimension d
// can take inline: none when the attribute is there but not a map (an
// update adding to it is refused, and parked).
func (sh ReportShape) InlineRoom(d aggregates.Dimension) int {
	if sh.Present[d] && sh.Entries[d] == nil {
		return 0
	}
	return max(MaxInlineEntries-len(sh.Entries[d]), 0)
}

// EntryItemWrites is how many entry items an update adding the names of
// dimension d writes, at most, on an item of this shape: the names the map
// does not hold beyond its room (ReportUpdate's rule; names whose delta is
// zero may write fewer).
func (sh ReportShape) EntryItemWrites(d aggregates.Dimension, names []string) int {
	added := 0
	for _, n := range names {
		if !sh.Entries[d][n] {
			added++
		}
	}
	return max(added-sh.InlineRoom(d), 0)
}

// ReportWrites are the updates of one part of a report's delta: the report
// item's first, then one per entry that goes to an entry item; Inline names
// the entries added to the report item's maps, per dimension.
type ReportWrites struct {
	Updates []*types.Update
	Inline  [3][]string
}

// ReportUpdate builds the additive updates of one part of a report's delta
// (the layout above), written at now. Totals use if_not_exists(x, 0) + d.
// An entry the report item holds inline is incremented there; a new entry
// goes inline while its map has room (a map the item lacks is set whole),
// on condition that the map still has that room, and otherwise to its entry
// item, incremented the same way, on condition that the map does not hold
// the name (or, when the attribute is there but no map, that it still is
// no map): a name is in one place. Which form is used follows the item's
// known shape, and that shape is the update's condition, so a stale guess
// cancels the transaction instead of corrupting the item.
func ReportUpdate(tableName string, k aggregates.ReportKey, delta *aggregates.Report, sh ReportShape, now string) (ReportWrites, error) {
	return ReportUpdateWith(tableName, k, delta, sh, now, UpdateOptions{})
}

// UpdateOptions are what a roll-up adds to a report update
// (docs/exactly-once.md "Tenant roll-ups"), all on the report item's
// update, the first of ReportWrites.Updates.
type UpdateOptions struct {
	// Branches is added to a partial's branches (if_not_exists(…, 0) + n)
	// when not zero.
	Branches int64
	// CheckCount sends the count as read (ReportShape.Count) as a
	// condition: transactionCount = :c, or, for 0, (attribute_not_exists
	// or = 0): a count an ADD brought back to zero is 0, not absent. A
	// branch report's part 0 sends it when its count delta is not zero, so
	// that the branch transition its roll-up delta carries is the one that
	// lands.
	CheckCount bool
	// Currency, when set, is the branch report's currency: set on the
	// item, on condition that it has none or the same.
	Currency string
}

// ReportUpdateWith is ReportUpdate with the roll-up's additions (opts).
func ReportUpdateWith(tableName string, k aggregates.ReportKey, delta *aggregates.Report, sh ReportShape, now string, opts UpdateOptions) (ReportWrites, error) {
	var out ReportWrites
	names := make(map[string]string, len(reportNames)+8)
	for n, a := range reportNames {
		names[n] = a
	}
	values := map[string]types.AttributeValue{
		":z": Int(0), ":et": S(aggregates.EntityReport), ":pt": S(string(k.Period.Type)),
		":pv": S(k.Period.Value), ":ua": S(now),
		":i": Num(delta.Income), ":x": Num(delta.Expense), ":n": Int(delta.Count),
	}
	set := []string{
		"#i = if_not_exists(#i, :z) + :i", "#x = if_not_exists(#x, :z) + :x", "#n = if_not_exists(#n, :z) + :n",
		"#et = :et", "#pt = :pt", "#pv = :pv", "#ua = :ua",
	}
	var cond []string
	if opts.Branches != 0 {
		set = append(set, "#br = if_not_exists(#br, :z) + :br")
		values[":br"] = Int(opts.Branches)
	}
	if opts.CheckCount {
		values[":c"] = Int(sh.Count)
		if sh.Count == 0 {
			cond = append(cond, "(attribute_not_exists(#n) OR #n = :c)")
		} else {
			cond = append(cond, "#n = :c")
		}
	}
	if opts.Currency != "" {
		values[":cur"] = S(opts.Currency)
		set = append(set, "#cur = :cur")
		cond = append(cond, "(attribute_not_exists(#cur) OR #cur = :cur)")
	}
	nv := 0
	value := func(v types.AttributeValue) string {
		nv++
		name := ":v" + strconv.Itoa(nv)
		values[name] = v
		return name
	}
	ne := 0
	for _, d := range aggregates.Dimensions {
		var existing, added []string
		for _, name := range slices.Sorted(maps.Keys(delta.Breakdowns[d])) {
			switch {
			case sh.Entries[d][name]:
				existing = append(existing, name)
			case delta.Breakdowns[d][name].IsZero():
				// A new entry of zero changes nothing.
			default:
				added = append(added, name)
			}
		}
		inline := added[:min(sh.InlineRoom(d), len(added))]
		for _, name := range added[len(inline):] {
			out.Updates = append(out.Updates, EntryUpdate(tableName, k, d, name, delta.Breakdowns[d][name]))
		}
		out.Inline[d] = inline
		b := "#b" + strconv.Itoa(int(d))
		if !sh.Present[d] {
			if len(inline) > 0 {
				m := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
				for _, name := range inline {
					m.Value[name] = TotalsAV(delta.Breakdowns[d][name])
				}
				set = append(set, b+" = "+value(m))
				cond = append(cond, "attribute_not_exists("+b+")")
			}
			continue
		}
		for _, name := range existing {
			t := delta.Breakdowns[d][name]
			ne++
			e := b + ".#k" + strconv.Itoa(ne)
			names["#k"+strconv.Itoa(ne)] = name
			cond = append(cond, "attribute_exists("+e+")")
			for _, f := range []struct {
				ph   string
				zero bool
				v    types.AttributeValue
			}{{"#i", t.Income.IsZero(), Num(t.Income)}, {"#x", t.Expense.IsZero(), Num(t.Expense)}, {"#n", t.Count == 0, Int(t.Count)}} {
				if f.zero {
					continue
				}
				// An inline entry holds its three figures (TotalsAV writes
				// them all; one without is refused, and parked): no
				// if_not_exists, so that 32 entries fit one expression.
				path := e + "." + f.ph
				set = append(set, path+" = "+path+" + "+value(f.v))
			}
		}
		for _, name := range inline {
			ne++
			e := b + ".#k" + strconv.Itoa(ne)
			names["#k"+strconv.Itoa(ne)] = name
			set = append(set, e+" = "+value(TotalsAV(delta.Breakdowns[d][name])))
			cond = append(cond, "attribute_not_exists("+e+")")
		}
		if len(inline) > 0 {
			// The map keeps at most MaxInlineEntries names: it must still
			// have room for these (consumers never shrink it, so a stale
			// shape can only have underestimated it).
			cond = append(cond, "size("+b+") <= "+value(Int(int64(MaxInlineEntries-len(inline)))))
		}
		if sh.Entries[d] != nil {
			// A name goes to its entry item only while the map does not
			// hold it: a name is in one place (a repair may have moved
			// names inline since the shape was read).
			for _, name := range added[len(inline):] {
				ne++
				names["#k"+strconv.Itoa(ne)] = name
				cond = append(cond, "attribute_not_exists("+b+".#k"+strconv.Itoa(ne)+")")
			}
		} else if len(added) > 0 {
			// The attribute is there but no map (damaged): every name went
			// to its entry item, on condition that it is still no map. A
			// repair that rebuilt it may hold these names inline now; the
			// update is then refused and redone on the fresh shape, so a
			// name stays in one place.
			cond = append(cond, "attribute_exists("+b+") AND NOT attribute_type("+b+", "+value(S("M"))+")")
		}
	}
	u := &types.Update{
		TableName:                 aws.String(tableName),
		Key:                       Key(k.Key()),
		UpdateExpression:          aws.String("SET " + strings.Join(set, ", ")),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}
	if len(cond) > 0 {
		u.ConditionExpression = aws.String(strings.Join(cond, " AND "))
	}
	if len(*u.UpdateExpression) > maxExpression || len(aws.ToString(u.ConditionExpression)) > maxExpression {
		return out, fmt.Errorf("report %s: update expression of %d bytes exceeds DynamoDB's limit", k, len(*u.UpdateExpression))
	}
	// Placeholders not used by this update must not be sent.
	for n := range names {
		if !strings.Contains(*u.UpdateExpression, n) && !strings.Contains(aws.ToString(u.ConditionExpression), n) {
			delete(names, n)
		}
	}
	out.Updates = append([]*types.Update{u}, out.Updates...)
	return out, nil
}

// EntryUpdate is the additive update of the entry item of name in dimension
// d of report k. It needs no condition: an entry's figures are the sum of
// its inline entry and its entry item, wherever a name went.
func EntryUpdate(tableName string, k aggregates.ReportKey, d aggregates.Dimension, name string, t aggregates.Totals) *types.Update {
	return &types.Update{
		TableName:        aws.String(tableName),
		Key:              Key(k.EntryKey(d, name)),
		UpdateExpression: aws.String("SET #i = if_not_exists(#i, :z) + :i, #x = if_not_exists(#x, :z) + :x, #n = if_not_exists(#n, :z) + :n, #et = :et"),
		ExpressionAttributeNames: map[string]string{
			"#i": AttrTotalIncome, "#x": AttrTotalExpense, "#n": AttrTransactionCount, "#et": AttrEntityType,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":z": Int(0), ":i": Num(t.Income), ":x": Num(t.Expense), ":n": Int(t.Count),
			":et": S(aggregates.EntityReportEntry),
		},
	}
}
