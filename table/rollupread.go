package table

import (
	"fmt"
	"maps"
	"strings"

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
