package writer

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// Branch is a branch as the API shows it. Document is the normalised
// document number, unique across all tenants. HasTransactions is true once
// the branch has had a transaction: it can then no longer be deleted.
type Branch struct {
	ID              string `json:"id"`
	Tenant          string `json:"tenant"`
	Name            string `json:"name"`
	Document        string `json:"document"`
	Status          string `json:"status"`
	HasTransactions bool   `json:"hasTransactions"`
	CreatedAt       string `json:"createdAt"`
	UpdatedAt       string `json:"updatedAt"`
	Version         int64  `json:"version"`
}

// BranchPage is a page of a tenant's branch listing.
type BranchPage struct {
	Items      []Branch `json:"items"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

var branchCreateFields = map[string]bool{"id": true, "name": true, "document": true, "status": true}

func branchLocation(tenant, id string) string { return "/v1/tenants/" + tenant + "/branches/" + id }

func branchItem(b Branch) map[string]ddbtypes.AttributeValue {
	item := keyAV(aggregates.BranchKey(b.Tenant, b.ID))
	item[attrEntityType] = strAV(aggregates.EntityBranch)
	item[attrID] = strAV(b.ID)
	item[attrTenant] = strAV(b.Tenant)
	item[attrName] = strAV(b.Name)
	item[attrDocument] = strAV(b.Document)
	item[attrStatus] = strAV(b.Status)
	item[attrCreatedAt] = strAV(b.CreatedAt)
	item[attrUpdatedAt] = strAV(b.UpdatedAt)
	item[attrVersion] = intAV(b.Version)
	gsi := aggregates.BranchDocumentIndexKey(b.Tenant, b.Document)
	item[attrGSI2PK], item[attrGSI2SK] = strAV(gsi.PK), strAV(gsi.SK)
	return item
}

func decodeBranch(item map[string]ddbtypes.AttributeValue) Branch {
	var b Branch
	b.ID, _ = stringAttr(item, attrID)
	b.Tenant, _ = stringAttr(item, attrTenant)
	b.Name, _ = stringAttr(item, attrName)
	b.Document, _ = stringAttr(item, attrDocument)
	b.Status, _ = stringAttr(item, attrStatus)
	b.HasTransactions = boolAttr(item, attrHasTransactions)
	b.CreatedAt, _ = stringAttr(item, attrCreatedAt)
	b.UpdatedAt, _ = stringAttr(item, attrUpdatedAt)
	b.Version, _ = intAttr(item, attrVersion)
	return b
}

// documentOwner is the owner item of document, held by the branch.
func documentOwner(tenant, branch, document string) owner {
	return owner{key: aggregates.DocumentOwnerKey(document), entity: aggregates.EntityDocumentOwner,
		valueAttr: attrDocument, value: document, tenant: tenant, holderAttr: attrBranch, holder: branch}
}

func documentTaken(document string) *Problem {
	p := problem(http.StatusConflict, ProblemDocumentTaken, "document number "+document+" belongs to another branch")
	p.Field = "document"
	return p
}

// tenantExists is the ConditionCheck that a tenant exists, whatever its
// status, for what is created under it.
func (s *Server) tenantExists(tenant string) ddbtypes.TransactWriteItem {
	return ddbtypes.TransactWriteItem{ConditionCheck: &ddbtypes.ConditionCheck{
		TableName: &s.cfg.Table, Key: keyAV(aggregates.TenantKey(tenant)),
		ConditionExpression:      aws.String("attribute_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": attrPK},
	}}
}

// createBranch serves POST /v1/tenants/{tenant}/branches: in one
// transaction, a check that the tenant exists, the branch put on condition
// that the id is free, and the document's owner item put on condition that
// the document is free.
func (s *Server) createBranch(w http.ResponseWriter, r *http.Request) {
	tenant, p := tenantPath(r)
	if p != nil {
		p.write(w)
		return
	}
	key, body, ok := s.mutationRequest(w, r, true, "a branch")
	if !ok {
		return
	}
	m, p := decodeObject(body, branchCreateFields)
	if p == nil {
		p = required(m, "id", "name", "document")
	}
	b := Branch{Tenant: tenant, Status: string(aggregates.StatusActive), Version: 1}
	if p == nil {
		b.ID, p = parseIDField("id", m["id"])
	}
	if p == nil {
		b.Name, p = parseDisplayName("name", m["name"])
	}
	if p == nil {
		b.Document, p = parseDocument("document", m["document"])
	}
	if raw, ok := m["status"]; p == nil && ok && !isNull(raw) {
		b.Status, p = parseChecked("status", raw, aggregates.ValidateTenantStatus)
	}
	if p == nil && !claimsOf(r).ProvesDocument(b.Document) {
		p = documentNotProven(b.Document)
	}
	if p != nil {
		p.write(w)
		return
	}
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, body),
		prepare: func(context.Context) (*change, response, *Problem, error) {
			b.CreatedAt = s.cfg.Now().UTC().Format(time.RFC3339Nano)
			b.UpdatedAt = b.CreatedAt
			resp := versionedResponse(http.StatusCreated, b, b.Version)
			resp.location = branchLocation(tenant, b.ID)
			return &change{op: "branch_create", items: []ddbtypes.TransactWriteItem{
				s.tenantExists(tenant),
				s.putNew(branchItem(b)),
				s.ownerPut(documentOwner(tenant, b.ID, b.Document), b.CreatedAt),
			}}, resp, nil, nil
		},
		conditionFailed: func(_ context.Context, f failure) (*Problem, bool, error) {
			switch f.index {
			case 0:
				return notFoundOf("tenant " + tenant), false, nil
			case 1:
				p := problem(http.StatusConflict, ProblemAlreadyExists, "branch "+b.ID+" already exists in tenant "+tenant)
				p.Field = "id"
				return p, false, nil
			}
			return documentTaken(b.Document), false, nil
		},
	})
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
	tenant, p := tenantPath(r)
	if p != nil {
		p.write(w)
		return
	}
	limit, start, p := s.directoryList(r, tenant, "branches")
	if p != nil {
		p.write(w)
		return
	}
	in := s.partitionQuery(aggregates.BranchPK(tenant), start)
	items, next, err := directoryPage(r.Context(), s, in, limit, tenant, "branches", decodeBranch)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, BranchPage{Items: items, NextCursor: next})
}

// patchBranch serves PATCH …/branches/{branch}: name, status and document,
// on condition that If-Match names the current version. A new document is
// taken and the old one freed in the same transaction as the change. It is
// an UpdateItem, never a put of the whole item, so it cannot erase the
// hasTransactions marker a concurrent first transaction sets.
func (s *Server) patchBranch(w http.ResponseWriter, r *http.Request) {
	tenant, branch, p := branchPath(r)
	if p != nil {
		p.write(w)
		return
	}
	expected, key, body, ok := s.patchRequest(w, r)
	if !ok {
		return
	}
	m, p := decodePatchFields(body, "name", "document", "status")
	var name, status, document string
	if raw, ok := m["name"]; p == nil && ok {
		name, p = parseDisplayName("name", raw)
	}
	if raw, ok := m["document"]; p == nil && ok {
		if document, p = parseDocument("document", raw); p == nil && !claimsOf(r).ProvesDocument(document) {
			p = documentNotProven(document)
		}
	}
	if raw, ok := m["status"]; p == nil && ok {
		status, p = parseChecked("status", raw, aggregates.ValidateTenantStatus)
	}
	if p != nil {
		p.write(w)
		return
	}
	k := aggregates.BranchKey(tenant, branch)
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, body), lookupFirst: true,
		committed: func() { s.forget(aggregates.BranchKey(tenant, branch)) }, // a suspension takes effect here at once
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			item, p, err := s.getForChange(ctx, k, expected, "branch")
			if item == nil {
				return nil, response{}, p, err
			}
			b := decodeBranch(item)
			oldDocument := b.Document
			u := newUpdate().patch(attrName, &b.Name, name).patch(attrStatus, &b.Status, status)
			moved := document != "" && document != oldDocument
			if moved {
				b.Document = document
				gsi := aggregates.BranchDocumentIndexKey(tenant, document)
				u.set(attrDocument, strAV(document)).set(attrGSI2PK, strAV(gsi.PK)).set(attrGSI2SK, strAV(gsi.SK))
			}
			b.Version++
			b.UpdatedAt = s.cfg.Now().UTC().Format(time.RFC3339Nano)
			ch := one("branch_update", u.nextVersion(&s.cfg.Table, k, expected, b.Version, b.UpdatedAt))
			if moved {
				ch.items = append(ch.items,
					s.ownerDelete(documentOwner(tenant, branch, oldDocument)),
					s.ownerPut(documentOwner(tenant, branch, document), b.UpdatedAt))
			}
			return ch, versionedResponse(http.StatusOK, b, b.Version), nil, nil
		},
		conditionFailed: func(ctx context.Context, f failure) (*Problem, bool, error) {
			switch f.index {
			case 0:
				return s.staleOrGone(ctx, k, f.old, "branch")
			case 1:
				return nil, false, fmt.Errorf("branch %s/%s: the owner item of its document does not name it", tenant, branch)
			}
			return documentTaken(document), false, nil
		},
	})
}

// deleteBranch serves DELETE …/branches/{branch}, If-Match optional. It
// deletes the branch and frees its document in one transaction, on
// condition that the branch is at the version read and has never had a
// transaction (attribute_not_exists(hasTransactions); see directory.go).
func (s *Server) deleteBranch(w http.ResponseWriter, r *http.Request) {
	tenant, branch, p := branchPath(r)
	if p != nil {
		p.write(w)
		return
	}
	expected, key, ok := s.deleteRequest(w, r)
	if !ok {
		return
	}
	k := aggregates.BranchKey(tenant, branch)
	hasTransactions := func() *Problem {
		return problem(http.StatusConflict, ProblemBranchHasTransactions,
			"branch "+branch+" has transactions and cannot be deleted; suspend it instead (PATCH {\"status\":\"suspended\"})")
	}
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, nil), lookupFirst: true,
		committed: func() { s.forget(aggregates.BranchKey(tenant, branch)) },
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			item, p, err := s.getForChange(ctx, k, expected, "branch")
			if item == nil {
				return nil, response{}, p, err
			}
			b := decodeBranch(item)
			if b.HasTransactions {
				return nil, response{}, hasTransactions(), nil
			}
			return &change{op: "branch_delete", items: []ddbtypes.TransactWriteItem{
				{Delete: &ddbtypes.Delete{
					TableName: &s.cfg.Table, Key: keyAV(k),
					ConditionExpression:       aws.String("#v = :read AND attribute_not_exists(#has)"),
					ExpressionAttributeNames:  map[string]string{"#v": attrVersion, "#has": attrHasTransactions},
					ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":read": intAV(b.Version)},
				}},
				s.ownerDelete(documentOwner(tenant, branch, b.Document)),
			}}, response{status: http.StatusNoContent}, nil, nil
		},
		conditionFailed: func(ctx context.Context, f failure) (*Problem, bool, error) {
			if f.index == 1 {
				return nil, false, fmt.Errorf("branch %s/%s: the owner item of its document does not name it", tenant, branch)
			}
			item, err := s.current(ctx, k, f.old)
			switch {
			case err != nil:
				return nil, false, err
			case item == nil:
				return notFoundOf("branch"), false, nil
			case boolAttr(item, attrHasTransactions):
				return hasTransactions(), false, nil
			case expected > 0:
				v, _ := intAttr(item, attrVersion)
				return s.versionConflict(v), false, nil
			}
			return nil, true, nil // changed since read: read again
		},
	})
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
