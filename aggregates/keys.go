package aggregates

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// This file (and rollupkeys.go, the tenant roll-ups') is the one place
// where key formats live. Every item of the
// single table is addressed through these builders; docs/design.md has the table.
//
//	entity          PK                                   SK                          index
//	tenant          TENANT#{t}                           METADATA                    GSI1 TENANTS / {t}
//	branch          TENANT#{t}#BRANCH                    {branchId}                  GSI2 BRANCH#{document} / TENANT#{t}
//	account         TENANT#{t}#ACCOUNT                   {accountId}
//	account email   TENANT#{t}#ACCOUNT                   {accountId}#EMAIL#{email}   GSI1 ACCOUNT#{email} / TENANT#{t}
//	email owner     EMAIL#{email}                        UNIQUE
//	document owner  BRANCHDOC#{document}                 UNIQUE
//	transaction     TENANT#{t}#BRANCH#{b}#TRANSACTION    {YYYY-MM-DD}#{txnId}
//	history entry   TENANT#{t}#BRANCH#{b}#HISTORY        {txnId}#{version, 19 digits}
//	report          TENANT#{t}#BRANCH#{b}#REPORTING      {TYPE}#{value}: DAILY#2026-11-27, FISCAL_YEAR#FY2027, …
//	report entry    TENANT#{t}#BRANCH#{b}#REPORTING      {period}#{cat|cc|pm}#{name}
//	parked delta    TENANT#{t}#BRANCH#{b}#REPORTING      PARKED#{period}#{commit id}  GSI1 PARKED / {time}#{key}
//	flags           SETTINGS#APP                         FLAGS#V1
//	checkpoint (c)  STREAM#{streamId}#CHECKPOINTS#{nn}    SHARD#{shardId}     nn: 00-15, a hash of the shard id
//	lease (c)       STREAM#{streamId}                    LEASE#{shardId}
//	worker (c)      STREAM#{streamId}#WORKERS            WORKER#{owner}      a poller's registry item (table.HeartbeatWorker)
//	idempotency     IDEMPOTENCY#{tenant}#{key}           REQUEST     (tenant "_": requests of no tenant)
//	run marker      RUN#{eventID}                        RUN
//	quarantine      QUARANTINE#{eventID}                 RECORD                      GSI1 QUARANTINE / {time}#{eventID}
//	tenant budget (c) BUDGET#{tenant}#{shard}            BUCKET      (shard 0…S-1: one token bucket of the tenant's limit)
//	roll-up delta   TENANT#{t}#ROLLUPLANE#{k}            {claim}#{currency}#{n}      (rollupkeys.go)
//	roll-up partial TENANT#{t}#ROLLUP#{currency}#{k}     {TYPE}#{value}, entries and parked deltas as a report's
//
// (c): in the coordination table (table.CoordinationTableName), which has
// no stream, so the consumers' own bookkeeping and the writer's budget
// grants never become records of the stream they read; every other item is
// in the ledger table.
//
// Emails and document numbers are stored normalised (directory.go); both
// may appear only at the end of a key, after a fixed prefix, and neither may
// hold '#', so no value can address another entity's item.

// TenantPrefix starts the partition key of every item of a tenant
// (directory, transactions, reports).
const TenantPrefix = tenantPrefix

const (
	tenantPrefix      = "TENANT#"
	branchInfix       = "#BRANCH#"
	transactionSuffix = "#TRANSACTION"
	historySuffix     = "#HISTORY"
	reportingSuffix   = "#REPORTING"
)

// Entity types, the value of every item's entityType attribute.
const (
	EntityTenant      = "TENANT"
	EntityBranch      = "BRANCH"
	EntityAccount     = "ACCOUNT"
	EntityTransaction = "TRANSACTION"
	// EntityTransactionHistory is one entry of a transaction's audit
	// trail: a version of the transaction, who wrote it and when.
	EntityTransactionHistory = "TRANSACTION_HISTORY"
	EntityReport             = "REPORT"
	EntityFlags              = "FLAGS"
	EntityCheckpoint         = "CHECKPOINT"
	EntityRunMarker          = "RUN"
	EntityApplied            = "APPLIED"
	EntityLosses             = "LOSSES"
	EntityQuarantine         = "QUARANTINE"
	// EntityReportEntry is one breakdown entry of a report stored as its
	// own item, once the report's inline map of that dimension is full.
	EntityReportEntry = "REPORT_ENTRY"
	// EntityParked is a report delta DynamoDB refused for good (a damaged
	// or oversized report item), kept for reconcile --repair.
	EntityParked = "PARKED"
	EntityLease  = "LEASE"
	// EntityWorker is a poller's item in its stream's worker registry
	// (WorkerKey).
	EntityWorker      = "WORKER"
	EntityIdempotency = "IDEMPOTENCY"
	// EntityAccountEmail is an email address of an account, stored in the
	// account's item collection.
	EntityAccountEmail = "ACCOUNT_EMAIL"
	// EntityEmailOwner is the uniqueness item of a normalised email
	// address: it names the one account that holds the address.
	EntityEmailOwner = "EMAIL_OWNER"
	// EntityDocumentOwner is the uniqueness item of a branch document
	// number: it names the one branch that holds the document.
	EntityDocumentOwner = "DOCUMENT_OWNER"
	// EntityBudget is one shard of a tenant's distributed rate limit: a
	// token bucket the writers take grants from (table/budget.go).
	EntityBudget = "BUDGET"
)

// Key is an item's primary key.
type Key struct{ PK, SK string }

// String formats k as PK/SK for messages.
func (k Key) String() string { return k.PK + " / " + k.SK }

// TenantKey addresses a tenant's metadata item.
func TenantKey(tenant string) Key { return Key{PK: tenantPrefix + tenant, SK: "METADATA"} }

// TenantIndexPK is the GSI1 partition listing every tenant (a sparse
// index entry only tenant items carry); their GSI1SK is TenantIndexSK.
const TenantIndexPK = "TENANTS"

// TenantIndexSK is a tenant item's GSI1 sort key under TenantIndexPK: the
// tenant id, so the listing is in id order.
func TenantIndexSK(tenant string) string { return tenant }

// BranchPK is the partition holding a tenant's branches: one Query on it
// lists them, strongly consistent, in id order, without an index.
func BranchPK(tenant string) string { return tenantPrefix + tenant + "#BRANCH" }

// BranchKey addresses a branch item in its tenant's branch collection.
func BranchKey(tenant, branch string) Key { return Key{PK: BranchPK(tenant), SK: branch} }

// BranchDocumentIndexKey is a branch item's GSI2 key: the branch by its
// document number, the sort key naming the tenant.
func BranchDocumentIndexKey(tenant, document string) Key {
	return Key{PK: "BRANCH#" + document, SK: tenantPrefix + tenant}
}

// DocumentOwnerKey addresses the uniqueness item of a branch document
// number. It is put with attribute_not_exists in the same transaction as
// the branch that takes the document, and deleted in the same transaction
// as the branch (or document change) that frees it.
func DocumentOwnerKey(document string) Key { return Key{PK: "BRANCHDOC#" + document, SK: "UNIQUE"} }

// AccountPK is the partition holding a tenant's accounts and their email
// items: an account's profile sorts at {accountId}, its emails right after
// it at {accountId}#EMAIL#{email}.
func AccountPK(tenant string) string { return tenantPrefix + tenant + "#ACCOUNT" }

// AccountKey addresses an account's profile item in its tenant's account
// collection.
func AccountKey(tenant, account string) Key { return Key{PK: AccountPK(tenant), SK: account} }

// accountEmailInfix separates an account id from an email address in the
// sort key of an email item.
const accountEmailInfix = "#EMAIL#"

// AccountEmailKey addresses one email item of an account, in the account's
// item collection.
func AccountEmailKey(tenant, account, email string) Key {
	return Key{PK: AccountPK(tenant), SK: account + accountEmailInfix + email}
}

// AccountItemsRange returns the inclusive sort key bounds of one account's
// items (profile and emails): ids hold no '#' and every character an id may
// hold sorts after '#', so "{id}" ≤ SK ≤ "{id}$" selects exactly the
// account's items and no other account's ("{id}x…" sorts after "{id}$").
func AccountItemsRange(account string) (lo, hi string) { return account, account + "$" }

// ParseAccountSK splits an account collection sort key: the account id, and
// the email address when the item is an email item ("" for the profile).
func ParseAccountSK(sk string) (account, email string) {
	account, email, _ = strings.Cut(sk, accountEmailInfix)
	return account, email
}

// AccountEmailIndexKey is an email item's GSI1 key: the address, the sort
// key naming the tenant, so a lookup by address tells the tenant.
func AccountEmailIndexKey(tenant, email string) Key {
	return Key{PK: "ACCOUNT#" + email, SK: tenantPrefix + tenant}
}

// EmailOwnerKey addresses the uniqueness item of a normalised email
// address. It is put with attribute_not_exists in the same transaction as
// the email item that takes the address, and deleted in the same
// transaction as the email item that frees it.
func EmailOwnerKey(email string) Key { return Key{PK: "EMAIL#" + email, SK: "UNIQUE"} }

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

// HistoryPK is the partition holding the audit trail of a branch's
// transactions: every version of each, in a partition of its own so that
// neither the transaction listing nor the stream consumers' and
// reconcile's reading of transaction partitions meets it (the consumers
// fold only keys ParseTransactionPK accepts, which this is not).
func HistoryPK(tenant, branch string) string {
	return tenantPrefix + tenant + branchInfix + branch + historySuffix
}

// HistoryVersionDigits is the width of the zero-padded version in a
// history entry's sort key: every positive int64 fits, so the entries of a
// transaction sort by version.
const HistoryVersionDigits = 19

// HistoryKey addresses the history entry of version version of
// transaction id: the transaction's id first, so one Query with
// begins_with(SK, HistoryPrefix(id)) reads its entries in version order.
// Ids hold no '#', so no id's prefix is another's.
func HistoryKey(tenant, branch, id string, version int64) Key {
	return Key{PK: HistoryPK(tenant, branch), SK: HistoryPrefix(id) + fmt.Sprintf("%0*d", HistoryVersionDigits, version)}
}

// HistoryPrefix is the sort key prefix of transaction id's history
// entries.
func HistoryPrefix(id string) string { return id + "#" }

// ReportPK is the partition holding a branch's reports.
func ReportPK(tenant, branch string) string {
	return tenantPrefix + tenant + branchInfix + branch + reportingSuffix
}

// ParseReportPK splits a report partition key into tenant and branch, as
// ParseTransactionPK does for transactions.
func ParseReportPK(pk string) (tenant, branch string, ok bool) {
	if !strings.HasPrefix(pk, tenantPrefix) || !strings.HasSuffix(pk, reportingSuffix) {
		return "", "", false
	}
	tenant, branch, found := strings.Cut(pk[len(tenantPrefix):len(pk)-len(reportingSuffix)], branchInfix)
	if !found || tenant == "" || branch == "" {
		return "", "", false
	}
	return tenant, branch, true
}

// ReportKey addresses one report of a branch, or (Currency set, Branch
// empty) one roll-up partial: lane Lane's share of the tenant's roll-up in
// Currency (RollupKey.Report, rollupkeys.go). A partial is a report item
// plus the figure branches, so the consumers fold, update, park and repair
// it with the same code as a branch report.
type ReportKey struct {
	Tenant, Branch string
	Period         Period
	// Currency and Lane are set for a roll-up partial only.
	Currency string
	Lane     int
}

// IsRollup reports whether r addresses a roll-up partial.
func (r ReportKey) IsRollup() bool { return r.Currency != "" }

// Rollup returns the partial r addresses; ok is false for a branch report.
func (r ReportKey) Rollup() (RollupKey, bool) {
	if !r.IsRollup() {
		return RollupKey{}, false
	}
	return RollupKey{Tenant: r.Tenant, Currency: r.Currency, Lane: r.Lane, Period: r.Period}, true
}

// pk is the partition of the report's items.
func (r ReportKey) pk() string {
	if r.IsRollup() {
		return RollupPK(r.Tenant, r.Currency, r.Lane)
	}
	return ReportPK(r.Tenant, r.Branch)
}

// Key returns the item key of the report.
func (r ReportKey) Key() Key { return Key{PK: r.pk(), SK: r.Period.String()} }

// String formats r as its item key.
func (r ReportKey) String() string { return r.Key().String() }

// Code is the dimension's short name in entry and parked keys.
func (d Dimension) Code() string { return [...]string{"cat", "cc", "pm"}[d] }

// ParseDimensionCode is the inverse of Dimension.Code.
func ParseDimensionCode(s string) (Dimension, bool) {
	for _, d := range Dimensions {
		if d.Code() == s {
			return d, true
		}
	}
	return 0, false
}

// EntryKey addresses the item holding one breakdown entry of a report
// outside the report item: in the report's partition, sorted right after
// the report item, so one Query on the report's sort key prefix reads the
// report with all its entries. The name comes last, after a fixed prefix,
// so no name (whatever it holds) can address another item.
func (r ReportKey) EntryKey(d Dimension, name string) Key {
	return Key{PK: r.pk(), SK: r.Period.String() + "#" + d.Code() + "#" + name}
}

// EntriesPrefix is the sort key prefix of the report's entry items.
func (r ReportKey) EntriesPrefix() string { return r.Period.String() + "#" }

// parkedPrefix starts the sort key of parked deltas in a report partition.
const parkedPrefix = "PARKED#"

// ParkedKey addresses a parked delta of report r: id names the commit that
// parked it (unique per guard claim), so a commit parks a report's delta at
// most once.
func (r ReportKey) ParkedKey(id string) Key {
	return Key{PK: r.pk(), SK: parkedPrefix + r.Period.String() + "#" + id}
}

// ParkedPrefix is the sort key prefix of the report's parked deltas.
func (r ReportKey) ParkedPrefix() string { return parkedPrefix + r.Period.String() + "#" }

// ParkedIndexPK is the GSI1 partition listing parked deltas (sparse, like
// QuarantineIndexPK); GSI1SK is the time parked followed by the item's key.
const ParkedIndexPK = "PARKED"

// ReportItemKind says what an item of a report partition is.
type ReportItemKind int

// The kinds of items in a report partition.
const (
	ReportHeader ReportItemKind = iota // the report item: totals and inline entries
	ReportEntry                        // one breakdown entry of the report
	ReportParked                       // a parked delta of the report
)

// ReportItemRef is a parsed key of an item in a report partition.
type ReportItemRef struct {
	Report ReportKey
	Kind   ReportItemKind
	Dim    Dimension // ReportEntry
	Name   string    // ReportEntry: the entry's name; ReportParked: the commit id
}

// ParseReportItemKey parses the key of any item of a report partition: the
// report itself, one of its entries or one of its parked deltas.
func ParseReportItemKey(k Key) (ReportItemRef, error) {
	sk, parked := strings.CutPrefix(k.SK, parkedPrefix)
	typ, rest, _ := strings.Cut(sk, "#")
	pt, err := ParsePeriodType(typ)
	if err != nil {
		return ReportItemRef{}, fmt.Errorf("report key %s: %w", k, err)
	}
	n := periodValueLength(pt)
	if n == 0 || len(rest) < n {
		return ReportItemRef{}, fmt.Errorf("report key %s: period value too short", k)
	}
	rk, err := ParseReportKey(Key{PK: k.PK, SK: typ + "#" + rest[:n]})
	if err != nil {
		return ReportItemRef{}, err
	}
	ref := ReportItemRef{Report: rk}
	tail := rest[n:]
	switch {
	case parked:
		id, ok := strings.CutPrefix(tail, "#")
		if !ok || id == "" {
			return ReportItemRef{}, fmt.Errorf("report key %s: parked delta without an id", k)
		}
		ref.Kind, ref.Name = ReportParked, id
	case tail == "":
		ref.Kind = ReportHeader
	default:
		code, name, ok := strings.Cut(strings.TrimPrefix(tail, "#"), "#")
		d, known := ParseDimensionCode(code)
		if !strings.HasPrefix(tail, "#") || !ok || !known || name == "" {
			return ReportItemRef{}, fmt.Errorf("report key %s: not a report, entry or parked delta", k)
		}
		ref.Kind, ref.Dim, ref.Name = ReportEntry, d, name
	}
	return ref, nil
}

// ParseReportKey parses a report item key back into its parts: a branch
// report's, or a roll-up partial's (ParseRollupKey).
func ParseReportKey(k Key) (ReportKey, error) {
	if IsRollupPK(k.PK) {
		rk, err := ParseRollupKey(k)
		if err != nil {
			return ReportKey{}, err
		}
		return rk.Report(), nil
	}
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

// CheckpointBuckets is how many partitions a stream's checkpoints are
// spread over in the coordination table: a commit claims its shard's
// checkpoint, so at one commit per shard per second the busiest
// checkpoint partition takes about 2·shards/CheckpointBuckets write units
// a second (a transactional write of a small item is 2), 125 at 1,000
// shards (docs/design.md, "Scale"). Part of the layout: changing it moves
// every checkpoint.
const CheckpointBuckets = 16

// CheckpointKey addresses the checkpoint of one shard of one stream, an
// item of the coordination table (not the ledger table, whose stream the
// consumers read). streamID is the stream's identity (its ARN); shardID the
// shard's id. The partition is one of the stream's CheckpointBuckets,
// chosen by a hash of the shard id.
func CheckpointKey(streamID, shardID string) Key {
	return Key{PK: CheckpointPK(streamID, CheckpointBucket(shardID)), SK: "SHARD#" + shardID}
}

// CheckpointPK is the partition key of bucket b (0 ≤ b < CheckpointBuckets)
// of a stream's checkpoints.
func CheckpointPK(streamID string, b int) string {
	return fmt.Sprintf("STREAM#%s#CHECKPOINTS#%02d", streamID, b)
}

// CheckpointBucket is the bucket of a shard's checkpoint: FNV-1a of the
// shard id modulo CheckpointBuckets.
func CheckpointBucket(shardID string) int {
	h := fnv.New32a()
	h.Write([]byte(shardID))
	return int(h.Sum32() % CheckpointBuckets)
}

// LeaseKey addresses the lease of one shard of a stream, held by at most one
// poller at a time: an item of the coordination table. A stream's leases
// share one partition, so a poller reads them all with one Query.
func LeaseKey(streamID, shardID string) Key {
	return Key{PK: LeasePK(streamID), SK: "LEASE#" + shardID}
}

// WorkersPK is the partition key of a stream's worker registry: one small
// item per poller (WorkerKey), so that a poller counts the live pollers
// with a Query of a handful of items rather than of every lease.
func WorkersPK(streamID string) string { return "STREAM#" + streamID + "#WORKERS" }

// WorkerKey addresses poller owner's item in the stream's worker registry,
// an item of the coordination table (table.HeartbeatWorker).
func WorkerKey(streamID, owner string) Key {
	return Key{PK: WorkersPK(streamID), SK: "WORKER#" + owner}
}

// LeasePK is the partition key of a stream's leases. Before the
// coordination table, it was also the partition of the stream's
// checkpoints, in the ledger table (table.LegacyStreamState).
func LeasePK(streamID string) string { return "STREAM#" + streamID }

// IdempotencyKey addresses the stored response of one mutating request of a
// tenant, keyed by its Idempotency-Key header.
func IdempotencyKey(tenant, key string) Key {
	return Key{PK: "IDEMPOTENCY#" + tenant + "#" + key, SK: "REQUEST"}
}

// PlatformIdempotencyKey addresses the stored response of a mutating request
// that belongs to no tenant (creating a tenant). "_" cannot start a tenant
// id, so these keys never meet a tenant's.
func PlatformIdempotencyKey(key string) Key { return IdempotencyKey("_", key) }

// BudgetKey addresses shard number shard of a tenant's budget, the
// distributed per-tenant limit (table/budget.go). The shard is in the
// partition key so that the S buckets of one tenant are S partition keys,
// none of them hot; BUDGET# starts no other key and a tenant id holds no
// '#', so no tenant's bucket is another's.
func BudgetKey(tenant string, shard int) Key {
	return Key{PK: "BUDGET#" + tenant + "#" + strconv.Itoa(shard), SK: "BUCKET"}
}

// AppliedPrefix begins every applied item's partition key.
const AppliedPrefix = "APPLIED#"

// AppliedKey is a branch's applied item, in the coordination table
// (exactly-once.md, "The design: counted changes", A): what the consumers
// applied of its transaction partition, counted, and the retired count
// of its compacted tombstones (table/applied.go). Tenant and branch ids
// hold no '#', so no two branches share one.
func AppliedKey(tenant, branch string) Key {
	return Key{PK: AppliedPrefix + tenant + "#" + branch, SK: "APPLIED"}
}

// LossesKey is the coordination table's loss item (docs/exactly-once.md,
// "The design: counted changes", L-a; table/abandon.go): one item for the
// whole table, whose losses count moves with every guard-alone abandon
// transaction of any stream's shard. One item, not one per stream: the
// counted repair pins it (R0, B1) and ConditionChecks it (R6, B5) as a
// change detector, and one item is one read and one action whatever the
// streams; losses are rare, so the item is never hot. Which shard lost
// what is on that shard's checkpoint (lostAt).
func LossesKey() Key { return Key{PK: "LOSSES", SK: "LOSSES"} }

// RunMarkerKey addresses the marker of the commit run that starts with the
// stream record eventID.
func RunMarkerKey(eventID string) Key { return Key{PK: "RUN#" + eventID, SK: "RUN"} }

// RunEndMarkerKey is the key of the end-keyed copy of a standard-mode run's
// marker, under the run's last record (docs/exactly-once.md, "The design:
// counted changes", P): found by that record even once the run's first
// record is trimmed from the stream.
func RunEndMarkerKey(eventID string) Key { return Key{PK: "RUNEND#" + eventID, SK: "RUN"} }

// QuarantineKey addresses the quarantine item of the stream record eventID.
func QuarantineKey(eventID string) Key { return Key{PK: "QUARANTINE#" + eventID, SK: "RECORD"} }

// QuarantineIndexPK is the GSI1 partition listing quarantined records (a
// sparse index: only quarantine items carry it); GSI1SK is the time of
// quarantine followed by the eventID, so the listing is chronological.
const QuarantineIndexPK = "QUARANTINE"
