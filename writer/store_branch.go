package writer

import (
	"context"
	"maps"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// The branch item (aggregates.BranchKey): its codec and its changes. Its GSI2 entry finds it by document number; the document's owner
// item (store_owner.go) keeps the number unique. hasTransactions, set by
// the branch's first transaction (branchMark), keeps it from being deleted
// ("Deleting a branch" in directory.go).

// Attributes of the branch item.
const (
	attrDocument        = "document"
	attrHasTransactions = "hasTransactions"
	attrSuspendedBy     = "suspendedBy"      // branches and account profiles, while suspended
	attrCurrency        = table.AttrCurrency // branches and transactions: the ISO 4217 code (currency.go)
)

// branchLayout is where b's fields are in its item (hasTransactions, set
// only by branchMark, apart).
func branchLayout(b *Branch) itemLayout {
	return itemLayout{key: aggregates.BranchKey(b.Tenant, b.ID), entity: aggregates.EntityBranch, version: &b.Version,
		strings: map[string]*string{attrID: &b.ID, attrTenant: &b.Tenant, attrName: &b.Name, attrDocument: &b.Document,
			attrStatus: &b.Status, attrCreatedAt: &b.CreatedAt, attrUpdatedAt: &b.UpdatedAt}}
}

// branchItem encodes b as its item; the GSI2 entry finds it by document.
// Its calendar (table.EncodeCalendar) is stored unless it is the default
// one, which a branch without calendar attributes has: a branch created
// without a calendar is stored exactly as before business calendars.
func branchItem(b Branch) map[string]ddbtypes.AttributeValue {
	item := branchLayout(&b).encode()
	gsi := aggregates.BranchDocumentIndexKey(b.Tenant, b.Document)
	item[attrGSI2PK], item[attrGSI2SK] = strAV(gsi.PK), strAV(gsi.SK)
	if cal, err := b.Calendar.calendar(); err == nil && !cal.Equal(aggregates.DefaultCalendar()) {
		maps.Copy(item, table.EncodeCalendar(cal))
	}
	if b.CalendarChangedAt != "" {
		item[table.AttrCalendarChangedAt] = strAV(b.CalendarChangedAt)
	}
	if b.SuspendedBy != "" {
		item[attrSuspendedBy] = strAV(b.SuspendedBy)
	}
	if b.Currency != "" {
		item[attrCurrency] = strAV(b.Currency)
	}
	return item
}

// decodeBranch decodes a branch item. suspendedBy is stored only while the
// branch is suspended; a suspended branch stored without it (suspended
// before it was recorded) shows as suspended by an admin.
func decodeBranch(item map[string]ddbtypes.AttributeValue) Branch {
	var b Branch
	branchLayout(&b).decode(item)
	b.SuspendedBy, _ = stringAttr(item, attrSuspendedBy)
	b.SuspendedBy, _ = aggregates.SuspensionBy(aggregates.Status(b.Status), b.SuspendedBy, "", false)
	b.HasTransactions = boolAttr(item, attrHasTransactions)
	b.Calendar = storedCalendar(item)
	b.CalendarChangedAt, _ = stringAttr(item, table.AttrCalendarChangedAt)
	b.Currency, _ = stringAttr(item, attrCurrency)
	return b
}

func documentTaken(document string) *Problem {
	p := problem(http.StatusConflict, ProblemDocumentTaken, "document number "+document+" belongs to another branch")
	p.Field = "document"
	return p
}

// branchMark is the branch's part of its first transaction's create (the
// only time a create writes to a shared item): an Update setting the
// hasTransactions marker, on condition that the branch is active (so it
// exists: a branch deleted meanwhile cancels the create) and still has
// currency, the one the create read and stamped ("" for none: currency.go).
// A failed condition forgets the branch's cached status and is 404 when the
// branch is gone, 409 when it is suspended, else (active again, or its
// currency changed) a retry, which reads the branch again.
func (s *Server) branchMark(tenant, branch, currency string) action {
	k := aggregates.BranchKey(tenant, branch)
	notActive := func(ctx context.Context, old map[string]ddbtypes.AttributeValue) (*Problem, bool, error) {
		s.forget(k)
		item, err := s.current(ctx, k, old)
		switch {
		case err != nil:
			return nil, false, err
		case item == nil:
			return branchNotFound(tenant, branch), false, nil
		}
		if st, _ := stringAttr(item, attrStatus); st != string(aggregates.StatusActive) {
			return branchSuspended(branch), false, nil
		}
		return nil, true, nil
	}
	names := map[string]string{"#st": attrStatus, "#has": attrHasTransactions, "#cur": attrCurrency}
	values := map[string]ddbtypes.AttributeValue{":active": strAV(string(aggregates.StatusActive)), ":true": boolAV(true)}
	cond := "#st = :active AND attribute_not_exists(#cur)"
	if currency != "" {
		cond = "#st = :active AND #cur = :cur"
		values[":cur"] = strAV(currency)
	}
	return action{
		item: ddbtypes.TransactWriteItem{Update: &ddbtypes.Update{
			TableName: &s.cfg.Table, Key: keyAV(k),
			UpdateExpression:          aws.String("SET #has = :true"),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
		}},
		onFail: notActive,
	}
}

// branchHasTransactions is the 409 of deleting a branch that has had
// transactions.
func branchHasTransactions(branch string) *Problem {
	return problem(http.StatusConflict, ProblemBranchHasTransactions,
		"branch "+branch+" has transactions and cannot be deleted; suspend it instead (PATCH {\"status\":\"suspended\"})")
}

// branchCreate puts b and its document's owner item, on condition that the
// tenant exists, the id is free and the document is free.
func (s *Server) branchCreate(b Branch) *change {
	exists := problem(http.StatusConflict, ProblemAlreadyExists, "branch "+b.ID+" already exists in tenant "+b.Tenant)
	exists.Field = "id"
	return newChange("branch_create",
		s.tenantExists(b.Tenant),
		action{item: s.putNew(branchItem(b)), onFail: refuse(exists)},
		s.ownerPut(documentOwner(b.Tenant, b.ID, b.Document), b.CreatedAt, documentTaken(b.Document)))
}

// branchPatch is what a PATCH of a branch changes: name, status, document
// and currency ("" leaves a field as it is), suspendedBy (by) when status
// is set, and calendar (nil leaves it).
type branchPatch struct {
	name, status, by, document, currency string
	calendar                             *aggregates.Calendar
}

// branchUpdate changes b, read at version expected, as bp says at now, on
// condition that it is still at that version: an UpdateItem, never a put of
// the whole item, so it cannot erase the hasTransactions marker a
// concurrent first transaction sets. A new document is taken and the old
// one freed in the same transaction. A calendar other than the stored one
// is written whole (table.EncodeCalendar) with calendarChangedAt now; the
// same calendar changes nothing of it. A currency other than the stored
// one is set on the further condition that the branch has no
// hasTransactions marker (currency.go): one a first transaction committed
// since the read fails it with 409 branch-has-transactions. It returns the
// change and the branch as it will be.
func (s *Server) branchUpdate(b Branch, expected int64, bp branchPatch, now string) (*change, Branch) {
	name, status, by, document, calendar := bp.name, bp.status, bp.by, bp.document, bp.calendar
	k := aggregates.BranchKey(b.Tenant, b.ID)
	oldDocument := b.Document
	u := newUpdate().patch(attrName, &b.Name, name).patch(attrStatus, &b.Status, status)
	recurrency := bp.currency != "" && bp.currency != b.Currency
	if recurrency {
		u.patch(attrCurrency, &b.Currency, bp.currency)
	}
	if status != "" {
		if b.SuspendedBy = by; by != "" {
			u.set(attrSuspendedBy, strAV(by))
		} else {
			u.remove(attrSuspendedBy)
		}
	}
	if calendar != nil {
		if old, err := b.Calendar.calendar(); err != nil || !old.Equal(*calendar) {
			enc := table.EncodeCalendar(*calendar)
			for _, attr := range []string{table.AttrTimeZone, table.AttrDayStartsAt, table.AttrWeekStartsOn, table.AttrFiscalYearStartMonth} {
				u.set(attr, enc[attr])
			}
			u.set(table.AttrCalendarChangedAt, strAV(now))
			b.Calendar, b.CalendarChangedAt = calendarView(*calendar), now
		}
	}
	moved := document != "" && document != oldDocument
	if moved {
		b.Document = document
		gsi := aggregates.BranchDocumentIndexKey(b.Tenant, document)
		u.set(attrDocument, strAV(document)).set(attrGSI2PK, strAV(gsi.PK)).set(attrGSI2SK, strAV(gsi.SK))
	}
	b.Version++
	b.UpdatedAt = now
	upd := s.versionedUpdate(k, "branch", u, expected, b.Version, b.UpdatedAt)
	if recurrency {
		upd = s.unmarked(upd, k, b.ID)
	}
	ch := newChange("branch_update", upd)
	if moved {
		ch.add(s.ownerDelete(documentOwner(b.Tenant, b.ID, oldDocument)),
			s.ownerPut(documentOwner(b.Tenant, b.ID, document), b.UpdatedAt, documentTaken(document)))
	}
	return ch, b
}

// unmarked adds to a's update of the branch at k the condition that the
// branch has no hasTransactions marker: a failure with the marker there is
// the 409 of a currency change (currencyFrozen), any other a's.
func (s *Server) unmarked(a action, k aggregates.Key, branch string) action {
	up := a.item.Update
	up.ConditionExpression = aws.String("(" + *up.ConditionExpression + ") AND attribute_not_exists(#has)")
	up.ExpressionAttributeNames["#has"] = attrHasTransactions
	onFail := a.onFail
	a.onFail = func(ctx context.Context, old map[string]ddbtypes.AttributeValue) (*Problem, bool, error) {
		item, err := s.current(ctx, k, old)
		if err == nil && item != nil && boolAttr(item, attrHasTransactions) {
			c, _ := stringAttr(item, attrCurrency)
			return currencyFrozen(branch, c), false, nil
		}
		return onFail(ctx, old)
	}
	return a
}

// branchDelete deletes b and frees its document, on condition that the
// branch is at the version read and has never had a transaction. A failed
// condition is 404 when the branch is gone, 409 when it has had a
// transaction meanwhile, 412 when the client named a version (expected > 0),
// else a change since the read: read again.
func (s *Server) branchDelete(b Branch, expected int64) *change {
	k := aggregates.BranchKey(b.Tenant, b.ID)
	del := ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{
		TableName: &s.cfg.Table, Key: keyAV(k),
		ConditionExpression:       aws.String("#v = :read AND attribute_not_exists(#has)"),
		ExpressionAttributeNames:  map[string]string{"#v": attrVersion, "#has": attrHasTransactions},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":read": intAV(b.Version)},
	}}
	changed := func(ctx context.Context, old map[string]ddbtypes.AttributeValue) (*Problem, bool, error) {
		item, err := s.current(ctx, k, old)
		switch {
		case err != nil:
			return nil, false, err
		case item == nil:
			return notFoundOf("branch"), false, nil
		case boolAttr(item, attrHasTransactions):
			return branchHasTransactions(b.ID), false, nil
		}
		return s.changedSinceRead(item, expected)
	}
	return newChange("branch_delete", action{item: del, onFail: changed}, s.ownerDelete(documentOwner(b.Tenant, b.ID, b.Document)))
}
