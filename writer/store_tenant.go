package writer

import (
	"net/http"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// The tenant item (aggregates.TenantKey): its codec and its changes. Its
// GSI1 entry lists it among all tenants.

// tenantLayout is where t's fields are in its item.
func tenantLayout(t *Tenant) itemLayout {
	return itemLayout{key: aggregates.TenantKey(t.ID), entity: aggregates.EntityTenant, version: &t.Version,
		strings: map[string]*string{attrID: &t.ID, attrName: &t.Name, attrStatus: &t.Status, attrCreatedAt: &t.CreatedAt, attrUpdatedAt: &t.UpdatedAt}}
}

// tenantItem encodes t as its item; the GSI1 entry lists it among all
// tenants.
// Its reportPeriods (table.EncodeReportPeriods) are stored unless they are
// the default ones, which a tenant without the attribute has.
func tenantItem(t Tenant) map[string]ddbtypes.AttributeValue {
	item := tenantLayout(&t).encode()
	item[attrGSI1PK] = strAV(aggregates.TenantIndexPK)
	item[attrGSI1SK] = strAV(aggregates.TenantIndexSK(t.ID))
	if ts, err := aggregates.ParseReportPeriods(t.ReportPeriods); err == nil && !slices.Equal(ts, aggregates.DefaultPeriodTypes) {
		item[table.AttrReportPeriods] = table.EncodeReportPeriods(ts)
	}
	if t.ReportPeriodsChangedAt != "" {
		item[table.AttrReportPeriodsChangedAt] = strAV(t.ReportPeriodsChangedAt)
	}
	return item
}

func decodeTenant(item map[string]ddbtypes.AttributeValue) Tenant {
	var t Tenant
	tenantLayout(&t).decode(item)
	t.ReportPeriods = storedReportPeriods(item)
	t.ReportPeriodsChangedAt, _ = stringAttr(item, table.AttrReportPeriodsChangedAt)
	return t
}

// tenantExists is the ConditionCheck that a tenant exists, whatever its
// status, for what is created under it: 404 when it does not.
func (s *Server) tenantExists(tenant string) action {
	return action{
		item: ddbtypes.TransactWriteItem{ConditionCheck: &ddbtypes.ConditionCheck{
			TableName: &s.cfg.Table, Key: keyAV(aggregates.TenantKey(tenant)),
			ConditionExpression:      aws.String("attribute_exists(#pk)"),
			ExpressionAttributeNames: map[string]string{"#pk": attrPK},
		}},
		onFail: refuse(notFoundOf("tenant " + tenant)),
	}
}

// tenantCreate puts t, on condition that no tenant has its id.
func (s *Server) tenantCreate(t Tenant) *change {
	p := problem(http.StatusConflict, ProblemAlreadyExists, "tenant "+t.ID+" already exists")
	p.Field = "id"
	return newChange("tenant_create", action{item: s.putNew(tenantItem(t)), onFail: refuse(p)})
}
