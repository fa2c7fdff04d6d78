package aggregates

import (
	"fmt"
	"strings"
)

// This file is the one place where key formats live. Every item of the
// single table is addressed through these builders; see DESIGN.md's table.
//
//	entity        PK                                      SK
//	tenant        TENANT#{t}                              METADATA
//	branch        TENANT#{t}#BRANCH                       {branchId}
//	account       TENANT#{t}#ACCOUNT                      {accountId}
//	transaction   TENANT#{t}#BRANCH#{b}#TRANSACTION       {YYYY-MM-DD}#{txnId}
//	report        TENANT#{t}#BRANCH#{b}#REPORTING         DAILY#… | MONTHLY#… | YEARLY#…
//	flags         SETTINGS#APP                            FLAGS#V1
//	checkpoint    STREAM#{streamId}                       SHARD#{shardId}
//	lease         STREAM#{streamId}                       LEASE#{shardId}
//	idempotency   IDEMPOTENCY#{tenant}#{key}              REQUEST
//	run marker    RUN#{eventID}                           RUN
//	quarantine    QUARANTINE#{eventID}                    RECORD

const (
	tenantPrefix      = "TENANT#"
	branchInfix       = "#BRANCH#"
	transactionSuffix = "#TRANSACTION"
	reportingSuffix   = "#REPORTING"
)

// Entity types, the value of every item's entityType attribute.
const (
	EntityTenant      = "TENANT"
	EntityBranch      = "BRANCH"
	EntityAccount     = "ACCOUNT"
	EntityTransaction = "TRANSACTION"
	EntityReport      = "REPORT"
	EntityFlags       = "FLAGS"
	EntityCheckpoint  = "CHECKPOINT"
	EntityRunMarker   = "RUN"
	EntityQuarantine  = "QUARANTINE"
	EntityLease       = "LEASE"
	EntityIdempotency = "IDEMPOTENCY"
)

// Key is an item's primary key.
type Key struct{ PK, SK string }

// String formats k as PK/SK for messages.
func (k Key) String() string { return k.PK + " / " + k.SK }

// TenantKey addresses a tenant's metadata item.
func TenantKey(tenant string) Key { return Key{PK: tenantPrefix + tenant, SK: "METADATA"} }

// BranchKey addresses a branch item in its tenant's branch collection.
func BranchKey(tenant, branch string) Key {
	return Key{PK: tenantPrefix + tenant + "#BRANCH", SK: branch}
}

// AccountKey addresses an account item in its tenant's account collection.
func AccountKey(tenant, account string) Key {
	return Key{PK: tenantPrefix + tenant + "#ACCOUNT", SK: account}
}

// TransactionPK is the partition holding a branch's transactions.
func TransactionPK(tenant, branch string) string {
	return tenantPrefix + tenant + branchInfix + branch + transactionSuffix
}

// TransactionKey addresses one transaction; its sort key starts with the
// transaction's UTC date so a branch's transactions sort by day.
func TransactionKey(tenant, branch string, date Date, id string) Key {
	return Key{PK: TransactionPK(tenant, branch), SK: date.String() + "#" + id}
}

// ParseTransactionPK splits a transaction partition key into tenant and
// branch. ok is false when pk does not have the transaction form; the split is
// at the first "#BRANCH#", which the writer guarantees is unambiguous by
// refusing '#' in ids.
func ParseTransactionPK(pk string) (tenant, branch string, ok bool) {
	if !strings.HasPrefix(pk, tenantPrefix) || !strings.HasSuffix(pk, transactionSuffix) {
		return "", "", false
	}
	mid := pk[len(tenantPrefix) : len(pk)-len(transactionSuffix)]
	tenant, branch, found := strings.Cut(mid, branchInfix)
	if !found || tenant == "" || branch == "" {
		return "", "", false
	}
	return tenant, branch, true
}

// ReportPK is the partition holding a branch's reports.
func ReportPK(tenant, branch string) string {
	return tenantPrefix + tenant + branchInfix + branch + reportingSuffix
}

// ReportKey addresses one report of a branch.
type ReportKey struct {
	Tenant, Branch string
	Period         Period
}

// Key returns the item key of the report.
func (r ReportKey) Key() Key { return Key{PK: ReportPK(r.Tenant, r.Branch), SK: r.Period.String()} }

// String formats r as its item key.
func (r ReportKey) String() string { return r.Key().String() }

// ParseReportKey parses a report item key back into its parts.
func ParseReportKey(k Key) (ReportKey, error) {
	if !strings.HasPrefix(k.PK, tenantPrefix) || !strings.HasSuffix(k.PK, reportingSuffix) {
		return ReportKey{}, fmt.Errorf("report key %s: partition is not TENANT#…#BRANCH#…#REPORTING", k)
	}
	mid := k.PK[len(tenantPrefix) : len(k.PK)-len(reportingSuffix)]
	tenant, branch, found := strings.Cut(mid, branchInfix)
	if !found || tenant == "" || branch == "" {
		return ReportKey{}, fmt.Errorf("report key %s: no tenant and branch", k)
	}
	typ, value, _ := strings.Cut(k.SK, "#")
	pt, err := ParsePeriodType(typ)
	if err != nil {
		return ReportKey{}, fmt.Errorf("report key %s: %w", k, err)
	}
	p, err := ParsePeriod(pt, value)
	if err != nil {
		return ReportKey{}, fmt.Errorf("report key %s: %w", k, err)
	}
	return ReportKey{Tenant: tenant, Branch: branch, Period: p}, nil
}

// FlagsKey addresses the application's settings singleton.
func FlagsKey() Key { return Key{PK: "SETTINGS#APP", SK: "FLAGS#V1"} }

// CheckpointKey addresses the checkpoint of one shard of one stream. streamID
// is the stream's identity (its ARN); shardID the shard's id.
func CheckpointKey(streamID, shardID string) Key {
	return Key{PK: "STREAM#" + streamID, SK: "SHARD#" + shardID}
}

// LeaseKey addresses the lease of one shard of a stream, held by at most one
// poller at a time. It shares the checkpoint's partition, so a poller can
// read a stream's leases and checkpoints with one Query.
func LeaseKey(streamID, shardID string) Key {
	return Key{PK: "STREAM#" + streamID, SK: "LEASE#" + shardID}
}

// IdempotencyKey addresses the stored response of one mutating request of a
// tenant, keyed by its Idempotency-Key header.
func IdempotencyKey(tenant, key string) Key {
	return Key{PK: "IDEMPOTENCY#" + tenant + "#" + key, SK: "REQUEST"}
}

// RunMarkerKey addresses the marker of the commit run that starts with the
// stream record eventID.
func RunMarkerKey(eventID string) Key { return Key{PK: "RUN#" + eventID, SK: "RUN"} }

// QuarantineKey addresses the quarantine item of the stream record eventID.
func QuarantineKey(eventID string) Key { return Key{PK: "QUARANTINE#" + eventID, SK: "RECORD"} }

// QuarantineIndexPK is the GSI1 partition listing quarantined records (a
// sparse index: only quarantine items carry it); GSI1SK is the time of
// quarantine followed by the eventID, so the listing is chronological.
const QuarantineIndexPK = "QUARANTINE"
