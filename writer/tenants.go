package writer

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// Tenant is a tenant as the API shows it.
type Tenant struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Status    string `json:"status"`
	CreatedAt string `json:"createdAt"`
	UpdatedAt string `json:"updatedAt"`
	Version   int64  `json:"version"`
}

// TenantPage is a page of the tenant listing.
type TenantPage struct {
	Items      []Tenant `json:"items"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

var tenantCreateFields = map[string]bool{"id": true, "name": true, "status": true}

func tenantLocation(id string) string { return "/v1/tenants/" + id }

// tenantItem encodes t as its item; the GSI1 entry lists it among all
// tenants.
func tenantItem(t Tenant) map[string]ddbtypes.AttributeValue {
	item := keyAV(aggregates.TenantKey(t.ID))
	item[attrEntityType] = strAV(aggregates.EntityTenant)
	item[attrID] = strAV(t.ID)
	item[attrName] = strAV(t.Name)
	item[attrStatus] = strAV(t.Status)
	item[attrCreatedAt] = strAV(t.CreatedAt)
	item[attrUpdatedAt] = strAV(t.UpdatedAt)
	item[attrVersion] = intAV(t.Version)
	item[attrGSI1PK] = strAV(aggregates.TenantIndexPK)
	item[attrGSI1SK] = strAV(aggregates.TenantIndexSK(t.ID))
	return item
}

func decodeTenant(item map[string]ddbtypes.AttributeValue) Tenant {
	var t Tenant
	t.ID, _ = stringAttr(item, attrID)
	t.Name, _ = stringAttr(item, attrName)
	t.Status, _ = stringAttr(item, attrStatus)
	t.CreatedAt, _ = stringAttr(item, attrCreatedAt)
	t.UpdatedAt, _ = stringAttr(item, attrUpdatedAt)
	t.Version, _ = intAttr(item, attrVersion)
	return t
}

// tenantPath validates the path's tenant.
func tenantPath(r *http.Request) (string, *Problem) {
	t := r.PathValue("tenant")
	if err := aggregates.ValidateID(t); err != nil {
		return "", fieldProblem("tenant", err.Error())
	}
	return t, nil
}

// createTenant serves POST /v1/tenants (admin): a put on condition that no
// tenant has the id.
func (s *Server) createTenant(w http.ResponseWriter, r *http.Request) {
	key, body, ok := s.mutationRequest(w, r, true, "a tenant")
	if !ok {
		return
	}
	m, p := decodeObject(body, tenantCreateFields)
	if p == nil {
		p = required(m, "id", "name")
	}
	t := Tenant{Status: string(aggregates.StatusActive), Version: 1}
	if p == nil {
		t.ID, p = parseIDField("id", m["id"])
	}
	if p == nil {
		t.Name, p = parseDisplayName("name", m["name"])
	}
	if raw, ok := m["status"]; p == nil && ok && !isNull(raw) {
		t.Status, p = parseChecked("status", raw, aggregates.ValidateTenantStatus)
	}
	if p != nil {
		p.write(w)
		return
	}
	s.mutate(w, r, mutation{
		idemKey: key, fp: fingerprint(r, body),
		prepare: func(context.Context) (*change, response, *Problem, error) {
			t.CreatedAt = s.cfg.Now().UTC().Format(time.RFC3339Nano)
			t.UpdatedAt = t.CreatedAt
			resp := versionedResponse(http.StatusCreated, t, t.Version)
			resp.location = tenantLocation(t.ID)
			return one("tenant_create", s.putNew(tenantItem(t))), resp, nil, nil
		},
		conditionFailed: func(context.Context, failure) (*Problem, bool, error) {
			p := problem(http.StatusConflict, ProblemAlreadyExists, "tenant "+t.ID+" already exists")
			p.Field = "id"
			return p, false, nil
		},
	})
}

// getTenant serves GET /v1/tenants/{tenant}, strongly consistent.
func (s *Server) getTenant(w http.ResponseWriter, r *http.Request) {
	tenant, p := tenantPath(r)
	if p != nil {
		p.write(w)
		return
	}
	getVersioned(s, w, r, aggregates.TenantKey(tenant), "tenant", decodeTenant)
}

// listTenants serves GET /v1/tenants (admin): the tenants in id order,
// from the sparse GSI1 partition TENANTS (eventually consistent, as every
// index read: a tenant created a moment ago may be missing).
func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) {
	limit, start, p := s.directoryList(r, "", "tenants")
	if p != nil {
		p.write(w)
		return
	}
	in := &dynamodb.QueryInput{
		TableName: &s.cfg.Table, IndexName: aws.String(table.IndexGSI1),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrGSI1PK},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": strAV(aggregates.TenantIndexPK)},
	}
	if start != "" {
		k := aggregates.TenantKey(start)
		in.ExclusiveStartKey = map[string]ddbtypes.AttributeValue{
			attrGSI1PK: strAV(aggregates.TenantIndexPK), attrGSI1SK: strAV(aggregates.TenantIndexSK(start)),
			attrPK: strAV(k.PK), attrSK: strAV(k.SK),
		}
	}
	items, next, err := directoryPage(r.Context(), s, in, limit, "", "tenants", decodeTenant)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, TenantPage{Items: items, NextCursor: next})
}

// patchTenant serves PATCH /v1/tenants/{tenant} (admin): name and status,
// on condition that If-Match names the current version. Suspending a tenant
// stops new transactions in all its branches.
func (s *Server) patchTenant(w http.ResponseWriter, r *http.Request) {
	tenant, p := tenantPath(r)
	if p != nil {
		p.write(w)
		return
	}
	expected, key, body, ok := s.patchRequest(w, r)
	if !ok {
		return
	}
	m, p := decodePatchFields(body, "name", "status")
	var name, status string
	if raw, ok := m["name"]; p == nil && ok {
		name, p = parseDisplayName("name", raw)
	}
	if raw, ok := m["status"]; p == nil && ok {
		status, p = parseChecked("status", raw, aggregates.ValidateTenantStatus)
	}
	if p != nil {
		p.write(w)
		return
	}
	k := aggregates.TenantKey(tenant)
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, body), lookupFirst: true,
		committed: func() { s.forget(aggregates.TenantKey(tenant)) }, // a suspension takes effect here at once
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			item, p, err := s.getForChange(ctx, k, expected, "tenant")
			if item == nil {
				return nil, response{}, p, err
			}
			t := decodeTenant(item)
			u := newUpdate().patch(attrName, &t.Name, name).patch(attrStatus, &t.Status, status)
			t.Version++
			t.UpdatedAt = s.cfg.Now().UTC().Format(time.RFC3339Nano)
			return one("tenant_update", u.nextVersion(&s.cfg.Table, k, expected, t.Version, t.UpdatedAt)),
				versionedResponse(http.StatusOK, t, t.Version), nil, nil
		},
		conditionFailed: func(ctx context.Context, f failure) (*Problem, bool, error) {
			return s.staleOrGone(ctx, k, f.old, "tenant")
		},
	})
}

// update builds an UpdateItem's SET clause with placeholder names, so
// attribute names never meet reserved words.
type update struct {
	sets   []string
	names  map[string]string
	values map[string]ddbtypes.AttributeValue
}

func newUpdate() *update {
	return &update{names: map[string]string{}, values: map[string]ddbtypes.AttributeValue{}}
}

func (u *update) set(attr string, v ddbtypes.AttributeValue) *update {
	n := strconv.Itoa(len(u.names))
	u.names["#u"+n], u.values[":u"+n] = attr, v
	u.sets = append(u.sets, "#u"+n+" = :u"+n)
	return u
}

// patch sets attr, and *field, to v unless v is "" (the patch leaves the
// field as it is).
func (u *update) patch(attr string, field *string, v string) *update {
	if v != "" {
		*field = v
		u.set(attr, strAV(v))
	}
	return u
}

// nextVersion returns the Update of k with u's sets and updatedAt and
// version set to the item's next, on condition that it is at version
// expected.
func (u *update) nextVersion(table *string, k aggregates.Key, expected, version int64, updatedAt string) ddbtypes.TransactWriteItem {
	u.set(attrUpdatedAt, strAV(updatedAt)).set(attrVersion, intAV(version))
	return u.item(table, k, "#v = :expected", map[string]string{"#v": attrVersion}, map[string]ddbtypes.AttributeValue{":expected": intAV(expected)})
}

// item returns the Update of k with condition cond, whose placeholders are
// condNames and condValues (they must not start with #u or :u).
func (u *update) item(table *string, k aggregates.Key, cond string, condNames map[string]string, condValues map[string]ddbtypes.AttributeValue) ddbtypes.TransactWriteItem {
	expr := "SET " + strings.Join(u.sets, ", ")
	names := map[string]string{}
	values := map[string]ddbtypes.AttributeValue{}
	for n, a := range u.names {
		names[n] = a
	}
	for n, v := range u.values {
		values[n] = v
	}
	for n, a := range condNames {
		names[n] = a
	}
	for n, v := range condValues {
		values[n] = v
	}
	if len(values) == 0 {
		values = nil
	}
	return ddbtypes.TransactWriteItem{Update: &ddbtypes.Update{
		TableName: table, Key: keyAV(k), UpdateExpression: &expr, ConditionExpression: &cond,
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}}
}
