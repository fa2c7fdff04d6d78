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

// This file is a branch's applied item, in the coordination table (no
// stream: its writes put no record into the stream the consumers read,
// and reconcile never meets it), under aggregates.AppliedKey
// (docs/exactly-once.md, "The design: counted changes"). Built so far:
//
//	entityType   APPLIED
//	retired      N, the stream records of the branch's compacted tombstones:
//	             each compaction adds the key's count after its mark (not its REMOVE)
//	applied      N, the writer-shaped records of the branch's transaction
//	             partition the consumers committed (step A: standard-mode runs)
//	probed       N, the rebase probes among them, counted apart
//	foreign      N, the other records of the partition committed (not writer-shaped)
//	compacted    N, the compactions' REMOVEs committed: counted apart, in
//	             neither applied nor retired (diagnosis only; the second review, C-a)
//
//	open         SS, the batches (plan layout 6) with landed parts of the
//	             branch and no count yet (OpenApplied, CountAppliedClose)
//	probedBy#<id> N, the probes of rebase <id> among probed (a valid
//	             ValidRebaseID only), in the same action: a rebase waits on its own
//
// and the rebase's (step B, session 26: rebase.go; docs/exactly-once.md,
// "B as built (session 26)"):
//
//	rebasing     S, the id of the rebase running (B1 to B5; a compaction refuses then)
//	epoch        N, moved by every rebase transaction and by AbandonRebase
//	foreignAck   N, foreign as the last rebase pinned it
//	fencedAt     S, RFC 3339: the branch's first rebase (ledgerctl unfence removes it)
//	rebased      S, the id of the last rebase that landed (its last transaction sets it)
//	repaired     S, the id of the counted repair whose transaction last landed (countedrepair.go)
//
// The batch consumers count from plan layout 6 (session 21). The item never
// carries expiresAt: it lives as long as its branch, whatever the
// coordination table's TTL does to checkpoints and leases.

// Attributes of the applied item.
const (
	AttrRetired      = "retired"
	AttrRebasing     = "rebasing"
	AttrAppliedCount = "applied"
	AttrProbed       = "probed"
	AttrForeign      = "foreign"
	AttrCompacted    = "compacted"
	// AttrOpen (SS) holds the ids of the batches (plan layout 6) that have
	// landed report parts of the branch and not yet its count: each a
	// "{stream label}~{shard}~{to}" (docs/exactly-once.md, "Plan layout 6",
	// step 5).
	AttrOpen = "open"
	// AttrProbedByPrefix starts the name of the per-rebase probe counts:
	// probedBy#<id> (ProbedByAttr).
	AttrProbedByPrefix = "probedBy#"
	// AttrEpoch (N, absent 0) is moved by every rebase transaction and by
	// an abandon of a rebase (docs/exactly-once.md, "B as built").
	AttrEpoch = "epoch"
	// AttrForeignAck (N) is foreign as the last rebase pinned it.
	AttrForeignAck = "foreignAck"
	// AttrFencedAt (S, RFC 3339) is set by the branch's first rebase.
	AttrFencedAt = "fencedAt"
	// AttrRebased (S) is the id of the last rebase whose B5 landed: set by
	// its last transaction, so that a lost answer of it is told from an
	// abandon of the rebase, which moves the epoch as far (review of step
	// B, S26-B2).
	AttrRebased = "rebased"
)

// ValidRebaseID reports whether id is a rebase id as ledgerctl makes them
// ("rb-" and 1 to 40 of [0-9a-z-]): only such a probe is counted under its
// own id (probedBy#<id>), so that no record can grow the applied item by
// an attribute of its choosing.
func ValidRebaseID(id string) bool {
	rest, ok := strings.CutPrefix(id, "rb-")
	if !ok || len(rest) == 0 || len(rest) > 40 {
		return false
	}
	for _, r := range rest {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r == '-') {
			return false
		}
	}
	return true
}

// ProbedByAttr is the name of rebase id's probe count on the applied item:
// a top-level attribute, so that the consumers' update needs no parent map
// (a SET into an absent map is a ValidationException that would cancel the
// commit: docs/exactly-once.md, "B as built (session 26)").
func ProbedByAttr(id string) string { return AttrProbedByPrefix + id }

// Applied is a branch's applied item as far as it is built.
type Applied struct {
	Exists    bool
	Retired   int64
	Applied   int64  // writer-shaped records committed
	Probed    int64  // rebase probes committed
	Foreign   int64  // other records of the transaction partition committed
	Compacted int64  // compactions' REMOVEs committed (apart: diagnosis)
	Rebasing  string // "" when no rebase runs
	// ProbedBy holds the probes committed per rebase id (probedBy#<id>);
	// nil when there are none.
	ProbedBy map[string]int64
	// Epoch, ForeignAck and FencedAt are the rebase's (step B): 0, 0 and
	// "" until the branch's first rebase.
	Epoch, ForeignAck int64
	FencedAt          string
	// Rebased is the id of the last rebase that landed ("" none).
	Rebased string
	// Repaired is the token ("<id>/<round>/<j>/e<epoch>") of the counted repair's
	// transaction that last landed ("" none: AttrRepaired, S26-R1).
	Repaired string
	// Open holds the open marks (AttrOpen), sorted; nil when none.
	Open []string
}

// DecodeApplied reads an applied item (nil: none yet, every count 0). A
// count of another type than N is an error: the item is ledger's own, and
// a count nobody can read proves nothing.
func DecodeApplied(item map[string]types.AttributeValue) (Applied, error) {
	if item == nil {
		return Applied{}, nil
	}
	a := Applied{Exists: true}
	for _, c := range []struct {
		name string
		to   *int64
	}{{AttrRetired, &a.Retired}, {AttrAppliedCount, &a.Applied}, {AttrProbed, &a.Probed}, {AttrForeign, &a.Foreign}, {AttrCompacted, &a.Compacted},
		{AttrEpoch, &a.Epoch}, {AttrForeignAck, &a.ForeignAck}} {
		if _, present := item[c.name]; present {
			var ok bool
			if *c.to, ok = Int64(item, c.name); !ok {
				return Applied{}, fmt.Errorf("applied item %s: %s is not an integer", KeyOf(item), c.name)
			}
		}
	}
	a.Rebasing, _ = String(item, AttrRebasing)
	a.FencedAt, _ = String(item, AttrFencedAt)
	a.Rebased, _ = String(item, AttrRebased)
	a.Repaired, _ = String(item, AttrRepaired)
	for name := range item {
		id, ok := strings.CutPrefix(name, AttrProbedByPrefix)
		if !ok {
			continue
		}
		n, ok := Int64(item, name)
		if !ok {
			return Applied{}, fmt.Errorf("applied item %s: %s is not an integer", KeyOf(item), name)
		}
		if a.ProbedBy == nil {
			a.ProbedBy = map[string]int64{}
		}
		a.ProbedBy[id] = n
	}
	if ss, ok := item[AttrOpen].(*types.AttributeValueMemberSS); ok {
		a.Open = slices.Sorted(slices.Values(ss.Value))
	}
	return a, nil
}

// GetApplied reads branch (tenant, branch)'s applied item from the
// coordination table coord, strongly consistent.
func GetApplied(ctx context.Context, api interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}, coord, tenant, branch string) (Applied, error) {
	out, err := api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord),
		Key: Key(aggregates.AppliedKey(tenant, branch)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Applied{}, fmt.Errorf("read the applied item of %s/%s: %w", tenant, branch, err)
	}
	return DecodeApplied(out.Item)
}

// A compaction retires a tombstone in two transactions (the second review
// of issue 25, C-a and C-b):
//
//  1. MarkTombstone: a counted change of the tombstone (compacting = the
//     run's id, changes + 1 with its sig, no probe) on condition that it
//     is still the tombstone read and not marked, with a ConditionCheck
//     that no rebase of its branch runs. Its record is a MODIFY from a
//     tombstone to a tombstone: absent to absent, no figure.
//  2. RetireTombstone: a DeleteItem of the marked tombstone on condition
//     of its mark and count, with the update of its branch's applied item
//     that adds the key's records (its count after the mark) to retired,
//     on condition that no rebase runs.
//
// So only a REMOVE of a marked tombstone is a compaction's (another
// path's delete of a tombstone is foreign), and retired counts the key's
// records, not the REMOVE, which changes no figure and is counted apart
// by the consumers.

// MarkTombstone is step 1 for the tombstone item (the whole item, as read:
// its sig is computed from it) of the ledger table, by compaction run id.
func MarkTombstone(ledgerTable, coord string, item map[string]types.AttributeValue, id string) ([]types.TransactWriteItem, error) {
	k := KeyOf(item)
	tenant, branch, ok := aggregates.ParseTransactionPK(k.PK)
	if !ok || !IsTombstone(item) {
		return nil, fmt.Errorf("mark %s: not a tombstone", k)
	}
	c, ok := Changes(item)
	if !ok {
		return nil, fmt.Errorf("mark %s: no change count", k)
	}
	next := make(map[string]types.AttributeValue, len(item)+1)
	for name, v := range item {
		next[name] = v
	}
	next[AttrCompacting] = S(id)
	Count(next, c+1)
	return []types.TransactWriteItem{
		{Update: &types.Update{
			TableName: aws.String(ledgerTable), Key: Key(k),
			UpdateExpression:    aws.String("SET #mark = :id, #ch = :c1, #sig = :sig REMOVE #probe"),
			ConditionExpression: aws.String("#ch = :c AND attribute_exists(#del) AND attribute_not_exists(#mark)"),
			ExpressionAttributeNames: map[string]string{"#mark": AttrCompacting, "#ch": AttrChanges, "#sig": AttrSig,
				"#probe": AttrProbe, "#del": AttrDeletedAt},
			ExpressionAttributeValues: map[string]types.AttributeValue{":id": S(id), ":c1": Int(c + 1), ":c": Int(c),
				":sig": next[AttrSig]},
		}},
		{ConditionCheck: &types.ConditionCheck{
			TableName: aws.String(coord), Key: Key(aggregates.AppliedKey(tenant, branch)),
			ConditionExpression:      aws.String("attribute_not_exists(#rb)"),
			ExpressionAttributeNames: map[string]string{"#rb": AttrRebasing},
		}},
	}, nil
}

// RetireTombstone is step 2 for the tombstone at k marked by compaction
// run id with changes c (its count after the mark): its delete on
// condition of both, and c added to its branch's retired count in the
// applied item of the coordination table coord, on condition that no
// rebase runs. Either condition failing cancels both.
func RetireTombstone(ledgerTable, coord string, k aggregates.Key, id string, c int64) ([]types.TransactWriteItem, error) {
	tenant, branch, ok := aggregates.ParseTransactionPK(k.PK)
	if !ok {
		return nil, fmt.Errorf("retire %s: not a transaction key", k)
	}
	return []types.TransactWriteItem{
		{Delete: &types.Delete{
			TableName: aws.String(ledgerTable), Key: Key(k),
			ConditionExpression:       aws.String("#ch = :c AND #mark = :id AND attribute_exists(#del)"),
			ExpressionAttributeNames:  map[string]string{"#ch": AttrChanges, "#mark": AttrCompacting, "#del": AttrDeletedAt},
			ExpressionAttributeValues: map[string]types.AttributeValue{":c": Int(c), ":id": S(id)},
		}},
		{Update: &types.Update{
			TableName: aws.String(coord), Key: Key(aggregates.AppliedKey(tenant, branch)),
			UpdateExpression:          aws.String("SET #r = if_not_exists(#r, :zero) + :n, #et = :et"),
			ConditionExpression:       aws.String("attribute_not_exists(#rb)"),
			ExpressionAttributeNames:  map[string]string{"#r": AttrRetired, "#et": AttrEntityType, "#rb": AttrRebasing},
			ExpressionAttributeValues: map[string]types.AttributeValue{":zero": Int(0), ":n": Int(c), ":et": S(aggregates.EntityApplied)},
		}},
	}, nil
}

// AppliedCount is what one commit claims of one branch's transaction
// partition: its writer-shaped records (Applied), the rebase probes among
// the records (Probed, not in Applied), the compactions' REMOVEs
// (Compacted, apart) and the others (Foreign) (docs/exactly-once.md, "The
// design: counted changes", A).
type AppliedCount struct {
	Tenant, Branch                      string
	Applied, Probed, Foreign, Compacted int64
	// ProbedBy counts the probes among Probed per rebase id (a valid
	// one: ValidRebaseID); nil when none.
	ProbedBy map[string]int64
}

// AddProbe counts one probe of rebase id (its record's probe attribute):
// in Probed, and in ProbedBy when id is a valid rebase id.
func (c *AppliedCount) AddProbe(id string) {
	c.Probed++
	if ValidRebaseID(id) {
		if c.ProbedBy == nil {
			c.ProbedBy = map[string]int64{}
		}
		c.ProbedBy[id]++
	}
}

// Records is how many records the count covers.
func (c AppliedCount) Records() int64 { return c.Applied + c.Probed + c.Foreign + c.Compacted }

// CountApplied is the update of c's branch's applied item in the
// coordination table coord that rides in the transaction of the commit
// claiming c's records: unconditional (the commit's guard is the
// condition: the claim and the count land together or not at all), one
// action on the item, so one per branch per transaction.
//
// The probes of each rebase id are also added to probedBy#<id>, in the same
// action (docs/exactly-once.md, "B as built (session 26)"): a rebase waits
// on its own probes' count.
func CountApplied(coord string, c AppliedCount) types.TransactWriteItem {
	expr := "SET #a = if_not_exists(#a, :zero) + :n, #p = if_not_exists(#p, :zero) + :p, " +
		"#f = if_not_exists(#f, :zero) + :f, #c = if_not_exists(#c, :zero) + :c, #et = :et"
	names := map[string]string{"#a": AttrAppliedCount, "#p": AttrProbed, "#f": AttrForeign,
		"#c": AttrCompacted, "#et": AttrEntityType}
	values := map[string]types.AttributeValue{":zero": Int(0), ":n": Int(c.Applied), ":p": Int(c.Probed),
		":f": Int(c.Foreign), ":c": Int(c.Compacted), ":et": S(aggregates.EntityApplied)}
	for i, id := range slices.Sorted(maps.Keys(c.ProbedBy)) {
		n, v := fmt.Sprintf("#pb%d", i), fmt.Sprintf(":pb%d", i)
		expr += fmt.Sprintf(", %s = if_not_exists(%s, :zero) + %s", n, n, v)
		names[n], values[v] = ProbedByAttr(id), Int(c.ProbedBy[id])
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(coord), Key: Key(aggregates.AppliedKey(c.Tenant, c.Branch)),
		UpdateExpression: aws.String(expr), ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}}
}

// CountAppliedClose is CountApplied that also removes the batch id from
// the branch's open marks (plan layout 6: the group of the branch's last
// report part, when its first was in an earlier group). A set emptied by
// DELETE is no attribute.
func CountAppliedClose(coord string, c AppliedCount, id string) types.TransactWriteItem {
	w := CountApplied(coord, c)
	w.Update.UpdateExpression = aws.String(aws.ToString(w.Update.UpdateExpression) + " DELETE #o :id")
	w.Update.ExpressionAttributeNames["#o"] = AttrOpen
	w.Update.ExpressionAttributeValues[":id"] = &types.AttributeValueMemberSS{Value: []string{id}}
	return w
}

// WellFormedOpenMark reports whether m has the form of every open mark a
// consumer writes, {label}~{shard}~{to} (processor's commit6: the stream's
// label, the shard, the batch's last sequence number; the shard and the
// last record not empty). A mark of another form is written by no
// consumer, so no group of any batch removes it or counts with it.
func WellFormedOpenMark(m string) bool {
	parts := strings.Split(m, "~")
	return len(parts) == 3 && parts[1] != "" && parts[2] != ""
}

// OpenApplied marks the branch's applied item open for the batch id (plan
// layout 6: the group of the branch's first report part, when its last is
// in a later group).
func OpenApplied(coord, tenant, branch, id string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(coord), Key: Key(aggregates.AppliedKey(tenant, branch)),
		UpdateExpression:         aws.String("SET #et = :et ADD #o :id"),
		ExpressionAttributeNames: map[string]string{"#o": AttrOpen, "#et": AttrEntityType},
		ExpressionAttributeValues: map[string]types.AttributeValue{":id": &types.AttributeValueMemberSS{Value: []string{id}},
			":et": S(aggregates.EntityApplied)},
	}}
}
