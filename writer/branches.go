package writer

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// Branch is a branch as the API shows it. Document is the normalised
// document number, unique across all tenants. HasTransactions is true once
// the branch has had a transaction: it can then no longer be deleted.
// Calendar is its business calendar (the default one, UTC days from
// midnight, when none was set); CalendarChangedAt the time of its last
// change by a PATCH (absent: never changed). SuspendedBy says who suspended
// a suspended branch, "admin" or "tenant" (absent when it is active): only
// an admin-scoped token lifts an admin's suspension. Currency is the ISO
// 4217 code every amount of its transactions is in (absent: none, the
// behaviour of before currencies); it can change only while the branch has
// no transactions (store_branch.go, "The currency").
type Branch struct {
	ID                string   `json:"id"`
	Tenant            string   `json:"tenant"`
	Name              string   `json:"name"`
	Document          string   `json:"document"`
	Status            string   `json:"status"`
	SuspendedBy       string   `json:"suspendedBy,omitempty"`
	HasTransactions   bool     `json:"hasTransactions"`
	Calendar          Calendar `json:"calendar"`
	CalendarChangedAt string   `json:"calendarChangedAt,omitempty"`
	Currency          string   `json:"currency,omitempty"`
	CreatedAt         string   `json:"createdAt"`
	UpdatedAt         string   `json:"updatedAt"`
	Version           int64    `json:"version"`
}

// BranchPage is a page of a tenant's branch listing.
type BranchPage struct {
	Items      []Branch `json:"items"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

func branchLocation(tenant, id string) string { return "/v1/tenants/" + tenant + "/branches/" + id }

// createBranch serves POST /v1/tenants/{tenant}/branches: in one
// transaction, a check that the tenant exists, the branch put on condition
// that the id is free, and the document's owner item put on condition that
// the document is free.
func (s *Server) createBranch(w http.ResponseWriter, r *http.Request) {
	tenant, p := tenantPath(r)
	key, body, ok := s.mutationRequest(w, r, p, keyRequiredToCreate("a branch"))
	if !ok {
		return
	}
	b := Branch{Tenant: tenant, Status: string(aggregates.StatusActive), Version: 1, Calendar: calendarView(aggregates.DefaultCalendar())}
	m, p := decodeFields(body,
		bodyField{"id", true, parseIDField, &b.ID},
		bodyField{"name", true, parseDisplayName, &b.Name},
		bodyField{"document", true, parseDocument, &b.Document},
		bodyField{"status", false, parseTenantStatus, &b.Status},
		bodyField{"currency", false, parseCurrency, &b.Currency},
		bodyField{name: "calendar"})
	if raw, ok := m["calendar"]; p == nil && ok {
		var cal aggregates.Calendar
		if cal, p = parseCalendar(raw, b.Calendar, false); p == nil {
			b.Calendar = calendarView(cal)
		}
	}
	if p == nil && !claimsOf(r).ProvesDocument(b.Document) {
		p = documentNotProven(b.Document)
	}
	if p != nil {
		p.write(w)
		return
	}
	b.SuspendedBy, _ = aggregates.SuspensionBy(aggregates.StatusActive, "", aggregates.Status(b.Status), claimsOf(r).Admin())
	s.mutate(w, r, s.directoryWrite(r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, body),
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			capped, p, err := s.currencyCap(ctx, tenant, b.Currency)
			if p != nil || err != nil {
				return nil, response{}, p, err
			}
			b.CreatedAt = s.cfg.Now().UTC().Format(time.RFC3339Nano)
			b.UpdatedAt = b.CreatedAt
			resp := versionedResponse(http.StatusCreated, b, b.Version)
			resp.location = branchLocation(tenant, b.ID)
			ch := s.branchCreate(b)
			if capped != nil {
				ch.add(*capped)
			}
			return ch, resp, nil, nil
		},
	}))
}

// getBranch serves GET …/branches/{branch}, strongly consistent.
func (s *Server) getBranch(w http.ResponseWriter, r *http.Request) {
	tenant, branch, p := branchPath(r)
	if p != nil {
		p.write(w)
		return
	}
	getVersioned(s, w, r, aggregates.BranchKey(tenant, branch), "branch", decodeBranch)
}

// listBranches serves GET /v1/tenants/{tenant}/branches: one strongly
// consistent Query on the tenant's branch partition, in id order. No index
// is needed: the branches of a tenant are one item collection.
func (s *Server) listBranches(w http.ResponseWriter, r *http.Request) {
	tenant, limit, in, ok := s.tenantListing(w, r, "branches", aggregates.BranchPK)
	if !ok {
		return
	}
	items, next, err := directoryPage(r.Context(), s, in, limit, tenant, "branches", decodeBranch)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, BranchPage{Items: items, NextCursor: next})
}

// patchBranch serves PATCH …/branches/{branch}: name, status, document,
// calendar and currency, on condition that If-Match names the current
// version. A currency other than the stored one is refused (409
// branch-has-transactions) when the branch has had a transaction, as read
// or, through the update's condition, as committed meanwhile (currency.go). A status change
// records who made it (suspendedBy, aggregates.SuspensionBy): a tenant's
// token that would lift an admin's suspension is 403 suspended-by-admin. A new document is
// taken and the old one freed in the same transaction as the change. It is
// an UpdateItem, never a put of the whole item, so it cannot erase the
// hasTransactions marker a concurrent first transaction sets.
func (s *Server) patchBranch(w http.ResponseWriter, r *http.Request) {
	tenant, branch, p := branchPath(r)
	ifm, key, body, ok := s.patchRequest(w, r, p, changeIfMatch)
	if !ok {
		return
	}
	var name, status, document, currency string
	provenDocument := func(field string, raw json.RawMessage) (string, *Problem) {
		d, p := parseDocument(field, raw)
		if p == nil && !claimsOf(r).ProvesDocument(d) {
			p = documentNotProven(d)
		}
		return d, p
	}
	var calendarPatch json.RawMessage // the calendar member, merged onto the stored calendar once read
	keepCalendar := func(_ string, raw json.RawMessage) (string, *Problem) {
		calendarPatch = raw
		return "", nil
	}
	p = decodePatchFields(body, bodyField{"name", false, parseDisplayName, &name},
		bodyField{"document", false, provenDocument, &document}, bodyField{"status", false, parseTenantStatus, &status},
		bodyField{"calendar", false, keepCalendar, new(string)}, bodyField{"currency", false, parseCurrency, &currency})
	if p == nil && calendarPatch != nil {
		// Validated here on the defaults, so that a value no calendar can
		// hold is refused before anything is read; merged onto the stored
		// calendar below.
		_, p = parseCalendar(calendarPatch, calendarView(aggregates.DefaultCalendar()), true)
	}
	if p != nil {
		p.write(w)
		return
	}
	k := aggregates.BranchKey(tenant, branch)
	s.mutate(w, r, s.directoryWrite(r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, body), lookupFirst: true,
		// A suspension, and a calendar change, take effect here at once.
		committed: func() { s.forget(aggregates.BranchKey(tenant, branch)) },
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			item, expected, p, err := s.readForPatch(ctx, k, ifm, "branch")
			if item == nil {
				return nil, response{}, p, err
			}
			b := decodeBranch(item)
			var cal *aggregates.Calendar
			if calendarPatch != nil {
				c, p := parseCalendar(calendarPatch, b.Calendar, true)
				if p != nil { // a stored field is damaged and the patch does not set it
					p.Detail = "the stored calendar is not valid here and the patch must set it: " + p.Detail
					return nil, response{}, p, nil
				}
				cal = &c
			}
			by, err := aggregates.SuspensionBy(aggregates.Status(b.Status), b.SuspendedBy, aggregates.Status(status), claimsOf(r).Admin())
			if err != nil {
				return nil, response{}, suspendedByAdmin("branch "+branch, err), nil
			}
			if currency != "" && currency != b.Currency && b.HasTransactions {
				return nil, response{}, currencyFrozen(branch, b.Currency), nil
			}
			var capped *action
			if currency != "" && currency != b.Currency {
				if capped, p, err = s.currencyCap(ctx, tenant, currency); p != nil || err != nil {
					return nil, response{}, p, err
				}
			}
			ch, b := s.branchUpdate(b, expected, branchPatch{name: name, status: status, by: by, document: document, currency: currency, calendar: cal},
				s.cfg.Now().UTC().Format(time.RFC3339Nano))
			if capped != nil {
				ch.add(*capped)
			}
			return ch, versionedResponse(http.StatusOK, b, b.Version), nil, nil
		},
	}))
}

// suspendedByAdmin is the 403 of a tenant's token lifting an admin's
// suspension of what (a branch or an account).
func suspendedByAdmin(what string, err error) *Problem {
	p := problem(http.StatusForbidden, ProblemSuspendedByAdmin, what+" stays suspended: "+err.Error())
	p.Field = "status"
	return p
}

// deleteBranch serves DELETE …/branches/{branch}, If-Match optional. It
// deletes the branch and frees its document in one transaction, on
// condition that the branch is at the version read and has never had a
// transaction (attribute_not_exists(hasTransactions); see directory.go).
func (s *Server) deleteBranch(w http.ResponseWriter, r *http.Request) {
	tenant, branch, p := branchPath(r)
	ifm, key, ok := s.deleteRequest(w, r, p)
	if !ok {
		return
	}
	k := aggregates.BranchKey(tenant, branch)
	s.mutate(w, r, s.directoryWrite(r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, nil), lookupFirst: true,
		committed: func() { s.forget(aggregates.BranchKey(tenant, branch)) },
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			item, p, err := s.getForChange(ctx, k, 0, "branch")
			if item == nil {
				return nil, response{}, p, err
			}
			b := decodeBranch(item)
			expected, p := s.versionFor(ifm, b.Version)
			if p != nil {
				return nil, response{}, p, nil
			}
			if b.HasTransactions {
				return nil, response{}, branchHasTransactions(branch), nil
			}
			return s.branchDelete(b, expected), response{status: http.StatusNoContent}, nil, nil
		},
	}))
}

// lookupBranch serves GET /v1/branches:lookup?document= (admin): the branch
// holding a document number in any tenant, found through GSI2 and confirmed
// with a strongly consistent read of the branch.
func (s *Server) lookupBranch(w http.ResponseWriter, r *http.Request) {
	s.lookupHolder(w, r, holderLookup{
		param: "document", check: checkDocument, what: "branch with this document",
		index: table.IndexGSI2, indexPK: attrGSI2PK,
		entryPK: func(document string) string { return aggregates.BranchDocumentIndexKey("", document).PK },
		confirm: func(ctx context.Context, hit map[string]ddbtypes.AttributeValue, document string) (response, bool, error) {
			tenant, _ := stringAttr(hit, attrTenant)
			id, _ := stringAttr(hit, attrID)
			item, err := s.getItem(ctx, aggregates.BranchKey(tenant, id))
			b := decodeBranch(item)
			if err != nil || item == nil || b.Document != document {
				return response{}, false, err
			}
			return versionedResponse(http.StatusOK, b, b.Version), true, nil
		},
	})
}
