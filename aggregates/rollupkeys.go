package aggregates

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Tenant roll-ups (issue 24; docs/design.md "Tenant roll-ups", "The lane
// layout"). A tenant's roll-up for one currency and one period is the sum
// of RollupLanes partials, each a report item written by one committer;
// the commits that change branch reports hand their roll-up deltas to
// those committers through roll-up delta items put in one of RollupLanes
// lane partitions. The keys:
//
//	roll-up delta     TENANT#{t}#ROLLUPLANE#{k}            {claim}#{currency}#{n}
//	roll-up partial   TENANT#{t}#ROLLUP#{currency}#{k}     {TYPE}#{value}, as a branch report
//	partial entry     TENANT#{t}#ROLLUP#{currency}#{k}     {period}#{cat|cc|pm}#{name}
//	parked (partial)  TENANT#{t}#ROLLUP#{currency}#{k}     PARKED#{period}#{commit id}
//
// k is the lane, 0…RollupLanes−1, written in decimal without leading
// zeros; {currency} is an ISO 4217 code (ValidateCurrency) or NoCurrency
// for the transactions of branches without one. Tenant ids cannot hold
// '#' (ValidateID), and the infixes differ from a branch's ("#BRANCH#"),
// so no roll-up key is another tenant's or a branch's.

// RollupLanes is K, the number of lanes and of partials per currency and
// period. A table's K never changes under running consumers: it rides in
// the batch plan's version string, so a resumer with another K refuses a
// pending batch by name.
const RollupLanes = 32

// NoCurrency stands for the currency of branches that have none, in
// roll-up keys and in the API (currency=-). It is never an ISO code.
const NoCurrency = "-"

const (
	rollupLaneInfix = "#ROLLUPLANE#"
	rollupInfix     = "#ROLLUP#"
)

// ValidateRollupCurrency accepts what a roll-up key may hold as its
// currency: a branch currency (ValidateCurrency) or NoCurrency.
func ValidateRollupCurrency(c string) error {
	if c == NoCurrency {
		return nil
	}
	return ValidateCurrency(c)
}

// RollupLane is the lane of a claim: FNV-1a of its id mod RollupLanes. The
// id must be a pure function of the claim that does not depend on the
// plan digest (the digest covers the delta items, so it cannot also place
// them), so that a resumer of a batch puts the same key.
func RollupLane(claimID string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(claimID))
	return int(h.Sum32() % RollupLanes)
}

// RollupLanePK is the partition of lane k of a tenant's roll-up deltas.
func RollupLanePK(tenant string, lane int) string {
	return tenantPrefix + tenant + rollupLaneInfix + strconv.Itoa(lane)
}

// RollupDeltaKey addresses the n-th roll-up delta item (n = 0 unless one
// commit's delta for the currency is cut in several) that the commit
// named claim puts for a tenant and currency into lane k.
func RollupDeltaKey(tenant string, lane int, claim, currency string, n int) Key {
	return Key{PK: RollupLanePK(tenant, lane), SK: claim + "#" + currency + "#" + strconv.Itoa(n)}
}

// ParseRollupLanePK splits a lane partition key into tenant and lane;
// ok is false for every other key and for a lane outside 0…RollupLanes−1.
func ParseRollupLanePK(pk string) (tenant string, lane int, ok bool) {
	rest, found := strings.CutPrefix(pk, tenantPrefix)
	if !found {
		return "", 0, false
	}
	tenant, k, found := strings.Cut(rest, rollupLaneInfix)
	if !found || tenant == "" || strings.Contains(tenant, "#") {
		return "", 0, false
	}
	lane, ok = parseLane(k)
	return tenant, lane, ok
}

// IsRollupLaneKey says whether pk is a roll-up lane partition: its records
// in the stream are roll-up deltas, not transactions.
func IsRollupLaneKey(pk string) bool {
	_, _, ok := ParseRollupLanePK(pk)
	return ok
}

// RollupPK is the partition of lane k's partial roll-ups of a tenant in a
// currency: the partials of every period, their entry items and their
// parked deltas.
func RollupPK(tenant, currency string, lane int) string {
	return tenantPrefix + tenant + rollupInfix + currency + "#" + strconv.Itoa(lane)
}

// ParseRollupPK splits a partial's partition key; ok is false for every
// other key, for a currency ValidateRollupCurrency refuses and for a lane
// outside 0…RollupLanes−1 (such an item can never be valid: a stray).
func ParseRollupPK(pk string) (tenant, currency string, lane int, ok bool) {
	rest, found := strings.CutPrefix(pk, tenantPrefix)
	if !found {
		return "", "", 0, false
	}
	tenant, rest, found = strings.Cut(rest, rollupInfix)
	if !found || tenant == "" || strings.Contains(tenant, "#") {
		return "", "", 0, false
	}
	currency, k, found := strings.Cut(rest, "#")
	if !found || ValidateRollupCurrency(currency) != nil {
		return "", "", 0, false
	}
	lane, ok = parseLane(k)
	return tenant, currency, lane, ok
}

// IsRollupPK says whether pk has the form of a partial's partition,
// whatever its currency and lane hold: reconcile names the ones
// ParseRollupPK refuses as strays.
func IsRollupPK(pk string) bool {
	rest, found := strings.CutPrefix(pk, tenantPrefix)
	if !found {
		return false
	}
	tenant, _, found := strings.Cut(rest, rollupInfix)
	return found && tenant != "" && !strings.Contains(tenant, "#")
}

// IsRollupLanePKForm says whether pk has the form of a lane partition,
// whatever its lane holds: reconcile names the ones ParseRollupLanePK
// refuses (a lane ≥ RollupLanes, a leading zero) as strays.
func IsRollupLanePKForm(pk string) bool {
	rest, found := strings.CutPrefix(pk, tenantPrefix)
	if !found {
		return false
	}
	tenant, _, found := strings.Cut(rest, rollupLaneInfix)
	return found && tenant != "" && !strings.Contains(tenant, "#")
}

func parseLane(s string) (int, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	k, err := strconv.Atoi(s)
	if err != nil || k < 0 || k >= RollupLanes || strconv.Itoa(k) != s {
		return 0, false
	}
	return k, true
}

// RollupKey addresses one partial roll-up: lane Lane's share of a tenant's
// figures in Currency for Period. It is a typed view of the partial's
// ReportKey (Report): the item layout (the partition, entry and parked
// keys) has its one home there, and these methods defer to it.
type RollupKey struct {
	Tenant, Currency string
	Lane             int
	Period           Period
}

// Key returns the partial's item key.
func (r RollupKey) Key() Key { return r.Report().Key() }

// String formats r as its item key.
func (r RollupKey) String() string { return r.Key().String() }

// EntryKey addresses one breakdown entry of the partial outside its item
// (ReportKey.EntryKey).
func (r RollupKey) EntryKey(d Dimension, name string) Key { return r.Report().EntryKey(d, name) }

// EntriesPrefix is the sort key prefix of the partial's entry items.
func (r RollupKey) EntriesPrefix() string { return r.Report().EntriesPrefix() }

// ParkedKey addresses a parked delta of the partial (ReportKey.ParkedKey).
func (r RollupKey) ParkedKey(id string) Key { return r.Report().ParkedKey(id) }

// ParkedPrefix is the sort key prefix of the partial's parked deltas.
func (r RollupKey) ParkedPrefix() string { return r.Report().ParkedPrefix() }

// RollupKeys are the RollupLanes partials of one tenant, currency and
// period: a reader sums them.
func RollupKeys(tenant, currency string, p Period) []RollupKey {
	ks := make([]RollupKey, RollupLanes)
	for k := range ks {
		ks[k] = RollupKey{Tenant: tenant, Currency: currency, Lane: k, Period: p}
	}
	return ks
}

// ParseRollupKey parses a partial's item key (its report item, not an
// entry or a parked delta) back into its parts.
func ParseRollupKey(k Key) (RollupKey, error) {
	tenant, currency, lane, ok := ParseRollupPK(k.PK)
	if !ok {
		return RollupKey{}, fmt.Errorf("roll-up key %s: partition is not TENANT#…#ROLLUP#{currency}#{lane}", k)
	}
	p, err := ParsePeriodKey(k.SK)
	if err != nil {
		return RollupKey{}, fmt.Errorf("roll-up key %s: %w", k, err)
	}
	return RollupKey{Tenant: tenant, Currency: currency, Lane: lane, Period: p}, nil
}
