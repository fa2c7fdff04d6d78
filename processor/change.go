package processor

import (
	"bytes"
	"errors"
	"fmt"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// change is a record as the commit sees it: the valid transactions on each
// side (nil for an absent or invalid image) and, when the record must be
// quarantined, why.
type change struct {
	rec   *Record
	isTxn bool // the keys say it is a transaction item
	dup   bool // repeats an earlier record of the same batch
	// unguarded: skipped by the guard as without effect rather than found
	// committed; its quarantine (if any) is redone, idempotently.
	unguarded bool
	// abandoned: a record of a trimmed half-committed batch (ShardGuard),
	// skipped: some of it may be applied already, so none of it is again.
	abandoned bool
	old, new  *aggregates.Transaction
	invalid   *aggregates.InvalidError
	// lane: the keys say it is a roll-up delta item (a lane key);
	// rollup is the delta its INSERT record carries, to fold into the
	// partials of its lane (nil for its MODIFY and REMOVE records, which
	// contribute nothing).
	lane   bool
	rollup *table.RollupDeltaItem
	// newer: a roll-up delta INSERT of a format this version does not read
	// (table.ErrNewerDeltaFormat): refused by name, never quarantined.
	newer error
	// kind is what the record is for its branch's applied item
	// (countOf): countNone unless the record's keys name a branch's
	// transaction partition, branch the branch they name.
	kind   countKind
	branch branchID
	// probeID is a probe's rebase id (its new image's probe), "" for
	// another kind.
	probeID string
}

// branchID names a branch: the applied item its records count into.
type branchID struct{ tenant, branch string }

// countKind is what a record of a branch's transaction partition counts
// as in the branch's applied item (docs/exactly-once.md, "The design:
// counted changes", A).
type countKind int

const (
	// countNone: not a record of a transaction partition (or one whose
	// keys are unreadable: no branch to count it for; it is quarantined).
	countNone countKind = iota
	// countApplied: writer-shaped (countOf).
	countApplied
	// countProbed: a rebase's probe.
	countProbed
	// countForeign: everything else of the partition.
	countForeign
	// countCompacted: a compaction's REMOVE of a tombstone it marked,
	// counted apart (diagnosis only), in neither applied nor retired: the
	// key's records up to its mark are in retired (the second review, C-a).
	countCompacted
)

func (k countKind) String() string {
	return [...]string{"none", "applied", "probed", "foreign", "compacted"}[k]
}

// counted reports whether the change counts in its branch's applied item:
// a record of a transaction partition, not a repeat of the batch.
func (c *change) counted() bool { return !c.dup && c.kind != countNone }

// effective reports whether the change can alter a report (or a roll-up
// partial).
func (c *change) effective() bool {
	return !c.dup && (c.old != nil || c.new != nil || c.rollup != nil)
}

// addTo adds the change's delta to fold: contribution(new) −
// contribution(old) to branch reports, a roll-up delta's figures to the
// partials of its lane.
func (c *change) addTo(fold *aggregates.Fold) {
	if c.dup {
		return
	}
	fold.AddChange(c.old, c.new)
	if c.rollup != nil {
		for k, d := range c.rollup.Partials() {
			fold.AddPartial(k, d)
		}
	}
}

// guarded reports whether the change must be claimed by a guard when
// committed: it can alter a report, or its record gets a quarantine item,
// which is written with the claim (docs/exactly-once.md, "Quarantine
// items").
func (c *change) guarded() bool { return c.effective() || c.needsQuarantine() }

// classify decides, from the keys first, whether r is about a transaction,
// then validates its images. The delta of the change is always
// contribution(new) − contribution(old) with an absent or invalid image
// counted as zero: a MODIFY from a valid to an invalid image subtracts the
// old contribution, and the later fix adds the new one back. A record is
// quarantined when its shape is wrong or its new image is an invalid
// transaction.

func classify(r *Record) change {
	c := change{rec: r}
	pk, hasPK := table.String(r.Keys, table.AttrPK)
	if hasPK && aggregates.IsRollupLaneKey(pk) {
		return classifyLane(r)
	}
	if r.Keys != nil && (!hasPK || !aggregates.IsTransactionKey(pk)) {
		return c // reports, markers, checkpoints, tenants, other tables' items: not ours to fold
	}
	// A transaction, or a record whose keys are missing or unreadable: it
	// might be one, so it is quarantined rather than dropped.
	c.isTxn = true
	if tenant, branch, ok := aggregates.ParseTransactionPK(pk); ok {
		c.branch, c.kind = branchID{tenant, branch}, countOf(r)
		if c.kind == countProbed {
			c.probeID, _ = table.String(r.NewImage, table.AttrProbe)
		}
	}
	shape := func(format string, args ...any) change {
		if c.invalid == nil {
			c.invalid = &aggregates.InvalidError{Reason: aggregates.ReasonShape, Detail: fmt.Sprintf(format, args...)}
		}
		return c
	}
	switch {
	case r.DecodeErr != nil:
		return shape("decode: %v", r.DecodeErr)
	case r.Keys == nil:
		return shape("record has no keys")
	case r.SequenceNumber == "":
		return shape("record has no sequence number")
	case r.StreamViewType != "" && r.StreamViewType != "NEW_AND_OLD_IMAGES":
		return shape("stream view type %s, want NEW_AND_OLD_IMAGES", r.StreamViewType)
	}
	var wantOld, wantNew bool
	switch r.EventName {
	case "INSERT":
		wantNew = true
	case "MODIFY":
		wantOld, wantNew = true, true
	case "REMOVE":
		wantOld = true
	default:
		return shape("event name %q, want INSERT, MODIFY or REMOVE", r.EventName)
	}
	if wantOld && r.OldImage != nil {
		if tx, err := table.ParseTransaction((r.OldImage)); err == nil {
			c.old = &tx
		}
	}
	if wantNew && r.NewImage != nil {
		// A tombstone (aggregates.ErrDeleted) is absent, not invalid: a
		// MODIFY to it subtracts the old image and quarantines nothing.
		tx, err := table.ParseTransaction((r.NewImage))
		var inv *aggregates.InvalidError
		switch {
		case err == nil:
			c.new = &tx
		case errors.As(err, &inv):
			c.invalid = inv
		}
	}
	if wantOld && r.OldImage == nil {
		shape("%s record without an old image", r.EventName)
	}
	if wantNew && r.NewImage == nil {
		shape("%s record without a new image", r.EventName)
	}
	return c
}

// countOf classifies a record of a branch's transaction partition for the
// branch's applied item (docs/exactly-once.md, "The design: counted
// changes", A), from its shape alone (not from whether its images are
// valid transactions):
//
//   - a rebase's probe (countProbed): a MODIFY whose new image holds probe
//     and whose two images are equal apart from changes, probe and sig,
//     the count stepping as the rebase's probe steps it (the old image's
//     changes + 1, or 1 where the old image has none: B2) and the new
//     sig matching: a write that only adds probe, or a probe's image
//     copied, is foreign;
//   - writer-shaped (countApplied): an INSERT whose new image holds
//     changes = 1, or a MODIFY whose new image holds the old image's
//     changes + 1, the new image's sig matching what it holds
//     (table.SigMatches), both images of the record's key, the image a
//     transaction item (entityType TRANSACTION: the writer writes no other
//     item there);
//   - a compaction's REMOVE (countCompacted, counted apart: the second
//     review, C-a): its old image a transaction's tombstone marked by a
//     compaction (compacting), with its changes and a matching sig
//     (table.MarkTombstone), not removed by the TTL service (C-b);
//   - foreign (countForeign): every other record, among them a REMOVE
//     that is not a compaction's (the writer never hard-deletes), an image
//     without changes, a count that does not step by one, a sig that does
//     not match, an item of the partition that is no transaction, and a
//     record that could not be decoded or carries the wrong view type.
func countOf(r *Record) countKind {
	if r.DecodeErr != nil || r.StreamViewType != "" && r.StreamViewType != "NEW_AND_OLD_IMAGES" {
		return countForeign
	}
	switch r.EventName {
	case "MODIFY":
		if r.OldImage == nil || r.NewImage == nil || !sameKey(r, r.OldImage) || !sameKey(r, r.NewImage) {
			return countForeign
		}
		o, ok1 := table.Changes(r.OldImage)
		n, ok2 := table.Changes(r.NewImage)
		if isProbe(r.OldImage, r.NewImage) && ok2 && (ok1 && n == o+1 || !ok1 && n == 1) && table.SigMatches(r.NewImage) {
			return countProbed
		}
		if ok1 && ok2 && n == o+1 && isTransactionItem(r.NewImage) && table.SigMatches(r.NewImage) {
			return countApplied
		}
	case "INSERT":
		if r.NewImage == nil || !sameKey(r, r.NewImage) {
			return countForeign
		}
		if n, ok := table.Changes(r.NewImage); ok && n == 1 && isTransactionItem(r.NewImage) && table.SigMatches(r.NewImage) {
			return countApplied
		}
	case "REMOVE":
		if r.OldImage == nil || !sameKey(r, r.OldImage) {
			return countForeign
		}
		_, marked := r.OldImage[table.AttrCompacting]
		if _, ok := table.Changes(r.OldImage); ok && marked && !r.ByTTL && table.IsTombstone(r.OldImage) &&
			isTransactionItem(r.OldImage) && table.SigMatches(r.OldImage) {
			return countCompacted
		}
	}
	return countForeign
}

// sameKey reports whether image holds the record's key.
func sameKey(r *Record, image map[string]ddbtypes.AttributeValue) bool {
	return table.KeyOf(image) == table.KeyOf(r.Keys)
}

// isTransactionItem reports whether image is an item of the writer's kind
// (a transaction or its tombstone).
func isTransactionItem(image map[string]ddbtypes.AttributeValue) bool {
	et, _ := table.String(image, table.AttrEntityType)
	return et == aggregates.EntityTransaction
}

// isProbe reports whether a MODIFY from old to new is a rebase's probe:
// new holds probe, and the two images are equal apart from changes, probe
// and sig (a write after a probe that kept probe changes something else,
// and is counted as what it is).
func isProbe(old, new map[string]ddbtypes.AttributeValue) bool {
	if _, ok := new[table.AttrProbe]; !ok {
		return false
	}
	skip := func(name string) bool {
		return name == table.AttrChanges || name == table.AttrProbe || name == table.AttrSig
	}
	for name, v := range new {
		if !skip(name) && !equalValue(name, v, old[name]) {
			return false
		}
	}
	for name := range old {
		if _, ok := new[name]; !ok && !skip(name) {
			return false
		}
	}
	return true
}

// equalValue reports whether attribute name holds the same value in a as
// in b (nil: absent), compared by table.Sig's canonical encoding: a
// number's text and a set's order do not matter.
func equalValue(name string, a, b ddbtypes.AttributeValue) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return bytes.Equal(table.Sig(map[string]ddbtypes.AttributeValue{name: a}), table.Sig(map[string]ddbtypes.AttributeValue{name: b}))
}

// classifyLane classifies a record of a roll-up lane key
// (docs/exactly-once.md "Stage 2"): an INSERT is a roll-up delta to fold;
// a MODIFY or REMOVE (the delete of a folded delta, an edit by another
// path) contributes nothing, as a delta item is put once and never
// changed. An INSERT whose new image is no delta item a consumer writes is
// quarantined (reason shape), never folded.
func classifyLane(r *Record) change {
	c := change{rec: r, lane: true}
	if r.EventName != "INSERT" {
		return c
	}
	bad := func(format string, args ...any) change {
		c.invalid = &aggregates.InvalidError{Reason: aggregates.ReasonShape, Detail: fmt.Sprintf(format, args...)}
		return c
	}
	switch {
	case r.DecodeErr != nil:
		return bad("decode: %v", r.DecodeErr)
	case r.SequenceNumber == "":
		return bad("record has no sequence number")
	case r.NewImage == nil:
		return bad("roll-up delta INSERT without a new image")
	}
	d, err := table.DecodeRollupDelta(r.NewImage)
	if errors.Is(err, table.ErrNewerDeltaFormat) {
		c.newer = err
		return c
	}
	if err != nil {
		return bad("%v", err)
	}
	if table.KeyOf(r.NewImage) != table.KeyOf(r.Keys) {
		return bad("roll-up delta %s: the new image's key is not the record's", table.KeyOf(r.Keys))
	}
	c.rollup = d
	return c
}

// quarantineForeignCurrency quarantines (reason currency) each change
// whose transactions are in another currency than the one the earlier
// changes of the batch folded into the same branch report: one branch
// report, one currency (docs/exactly-once.md, "Tenant roll-ups", fix 10).
// Such a record is not applied at all. It depends on the records alone, in
// order, so whoever plans the batch decides alike; the report's stored
// currency is checked by the commit (its part 0's condition).
func quarantineForeignCurrency(changes []change) {
	seen := map[aggregates.ReportKey]string{}
	for i := range changes {
		c := &changes[i]
		if c.dup || c.old == nil && c.new == nil {
			continue
		}
		var foreign string
		mine := map[aggregates.ReportKey]string{} // this record's sides
		for _, tx := range []*aggregates.Transaction{c.old, c.new} {
			if tx == nil {
				continue
			}
			cur := aggregates.RollupCurrency(tx.Currency)
			for _, k := range tx.ReportKeys() {
				switch s, ok := seen[k]; {
				case foreign != "":
				case ok && s != cur:
					foreign = fmt.Sprintf("currency %s, but the batch's earlier records of report %s are in %s", cur, k, s)
				case mine[k] != "" && mine[k] != cur:
					foreign = fmt.Sprintf("the old image is in currency %s, the new one in %s, both in report %s", mine[k], cur, k)
				}
				mine[k] = cur
			}
		}
		if foreign != "" {
			c.invalid = &aggregates.InvalidError{Reason: aggregates.ReasonCurrency, Field: aggregates.AttrCurrency, Detail: foreign}
			c.old, c.new = nil, nil
			continue
		}
		for _, tx := range []*aggregates.Transaction{c.old, c.new} {
			if tx == nil {
				continue
			}
			for _, k := range tx.ReportKeys() {
				seen[k] = aggregates.RollupCurrency(tx.Currency)
			}
		}
	}
}

// Transactions returns the valid transactions of a record's old and new
// images (nil for an absent or invalid image, or a record that is not about
// a transaction): the two sides of its delta.
func Transactions(r Record) (old, new *aggregates.Transaction) {
	c := classify(&r)
	return c.old, c.new
}

// dedupe marks the records of a batch that repeat an earlier record of it
// (same eventID; without an eventID, the same sequence number): a record
// delivered twice within one batch is applied once. Order says nothing
// about repetition: a record with a lower sequence number than one before
// it is a different record delivered out of order (a tumbling window's
// redelivery may do that, issue 12), and it is applied like any other. The
// callers that need order sort first (the tumbling-window handler) or read
// in order (the poller); Process refuses a ShardGuard batch out of order.
func dedupe(changes []change) {
	seen := make(map[string]bool, len(changes))
	for i := range changes {
		r := changes[i].rec
		if r.SequenceNumber == "" {
			continue // quarantined by classify when it is a transaction
		}
		id := "e:" + r.EventID
		if r.EventID == "" {
			id = "s:" + r.SequenceNumber
		}
		if seen[id] {
			changes[i] = change{rec: r, isTxn: changes[i].isTxn, dup: true}
			continue
		}
		seen[id] = true
	}
}

// outOfOrder returns the index of the first record (not a repeat) whose
// sequence number is below one before it, or -1.
func outOfOrder(changes []change) int {
	maxSeq := ""
	for i := range changes {
		r := changes[i].rec
		if changes[i].dup || r.SequenceNumber == "" {
			continue
		}
		if maxSeq != "" && CompareSequence(r.SequenceNumber, maxSeq) < 0 {
			return i
		}
		maxSeq = r.SequenceNumber
	}
	return -1
}

// firstNewerFormat is the index of the first change that is a roll-up
// delta of a newer format; -1 when none is.
func firstNewerFormat(changes []change) int {
	for i := range changes {
		if changes[i].newer != nil {
			return i
		}
	}
	return -1
}

// refuseNewerFormat fails a Process call at recs[i], a roll-up delta of a
// newer format than this version reads (docs/exactly-once.md, "Tenant
// roll-ups", review of session 16, S16-3): counted (conflicts_total{reason="newer_delta_format"})
// and returned as a *BatchError at i; the records before it are committed
// (res), it and the ones after are not, so the caller retries from it
// until a consumer of the newer version reads the shard.
func (p *Processor) refuseNewerFormat(recs []Record, i int, res Result) (Result, error) {
	p.metrics.Conflicts.WithLabelValues(ConflictNewerDeltaFormat).Inc()
	c := classifyLane(&recs[i])
	res.Committed = i
	return res, &BatchError{Index: i, EventID: recs[i].EventID, SequenceNumber: recs[i].SequenceNumber,
		Err: fmt.Errorf("record %s: %w (deploy this version's successor to every consumer: docs/runbook.md, \"Upgrading\")", recs[i].EventID, c.newer)}
}
