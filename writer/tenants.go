package writer

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// Tenant is a tenant as the API shows it. ReportPeriods are the period
// types its reports are kept in, in canonical order (DAILY, MONTHLY,
// YEARLY when none were set); ReportPeriodsChangedAt the time of their
// last change by a PATCH (absent: never changed).
type Tenant struct {
	ID                     string   `json:"id"`
	Name                   string   `json:"name"`
	Status                 string   `json:"status"`
	ReportPeriods          []string `json:"reportPeriods"`
	ReportPeriodsChangedAt string   `json:"reportPeriodsChangedAt,omitempty"`
	CreatedAt              string   `json:"createdAt"`
	UpdatedAt              string   `json:"updatedAt"`
	Version                int64    `json:"version"`
}

// TenantPage is a page of the tenant listing.
type TenantPage struct {
	Items      []Tenant `json:"items"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

// parseTenantStatus reads the status of a tenant, or of a branch: active
// or suspended.
var parseTenantStatus = checked(aggregates.ValidateTenantStatus)

func tenantLocation(id string) string { return "/v1/tenants/" + id }

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
	key, body, ok := s.mutationRequest(w, r, nil, keyRequiredToCreate("a tenant"))
	if !ok {
		return
	}
	t := Tenant{Status: string(aggregates.StatusActive), Version: 1, ReportPeriods: periodNames(aggregates.DefaultPeriodTypes)}
	m, p := decodeFields(body,
		bodyField{"id", true, parseIDField, &t.ID},
		bodyField{"name", true, parseDisplayName, &t.Name},
		bodyField{"status", false, parseTenantStatus, &t.Status},
		bodyField{name: "reportPeriods"})
	if raw, ok := m["reportPeriods"]; p == nil && ok {
		var ts []aggregates.PeriodType
		if ts, p = parseReportPeriods(raw); p == nil {
			t.ReportPeriods = periodNames(ts)
		}
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
			return s.tenantCreate(t), resp, nil, nil
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
	limit, start, ok := s.directoryList(w, r, nil, "", "tenants")
	if !ok {
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

// patchTenant serves PATCH /v1/tenants/{tenant} (admin): name, status and
// reportPeriods, on condition that If-Match names the current version.
// Suspending a tenant stops new transactions in all its branches; new
// reportPeriods apply to the transactions written after the change (the
// directory cache's TTL on other writers).
func (s *Server) patchTenant(w http.ResponseWriter, r *http.Request) {
	tenant, p := tenantPath(r)
	ifm, key, body, ok := s.patchRequest(w, r, p, changeIfMatch)
	if !ok {
		return
	}
	var name, status string
	var periods []aggregates.PeriodType
	parsePeriods := func(_ string, raw json.RawMessage) (string, *Problem) {
		var p *Problem
		periods, p = parseReportPeriods(raw)
		return "", p
	}
	if p := decodePatchFields(body, bodyField{"name", false, parseDisplayName, &name}, bodyField{"status", false, parseTenantStatus, &status},
		bodyField{"reportPeriods", false, parsePeriods, new(string)}); p != nil {
		p.write(w)
		return
	}
	k := aggregates.TenantKey(tenant)
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, body), lookupFirst: true,
		// A suspension, and new reportPeriods, take effect here at once.
		committed: func() { s.forget(aggregates.TenantKey(tenant)) },
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			item, expected, p, err := s.readForPatch(ctx, k, ifm, "tenant")
			if item == nil {
				return nil, response{}, p, err
			}
			t := decodeTenant(item)
			now := s.cfg.Now().UTC().Format(time.RFC3339Nano)
			u := newUpdate().patch(attrName, &t.Name, name).patch(attrStatus, &t.Status, status)
			if names := periodNames(periods); periods != nil && !slices.Equal(names, t.ReportPeriods) {
				u.set(table.AttrReportPeriods, table.EncodeReportPeriods(periods)).set(table.AttrReportPeriodsChangedAt, strAV(now))
				t.ReportPeriods, t.ReportPeriodsChangedAt = names, now
			}
			t.Version++
			t.UpdatedAt = now
			return newChange("tenant_update", s.versionedUpdate(k, "tenant", u, expected, t.Version, t.UpdatedAt)),
				versionedResponse(http.StatusOK, t, t.Version), nil, nil
		},
	})
}
