package aggregates

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRollupKeys_RoundTrip(t *testing.T) {
	p, err := ParsePeriodKey("MONTHLY#2026-11")
	require.NoError(t, err)
	for _, cur := range []string{"BRL", "JPY", NoCurrency} {
		for _, lane := range []int{0, 7, RollupLanes - 1} {
			rk := RollupKey{Tenant: "acme", Currency: cur, Lane: lane, Period: p}
			got, err := ParseRollupKey(rk.Key())
			require.NoError(t, err)
			assert.Equal(t, rk, got)
			assert.True(t, IsRollupPK(rk.Key().PK))

			lpk := RollupLanePK("acme", lane)
			tenant, l, ok := ParseRollupLanePK(lpk)
			assert.True(t, ok)
			assert.Equal(t, "acme", tenant)
			assert.Equal(t, lane, l)
		}
	}
	rk := RollupKey{Tenant: "acme", Currency: "BRL", Lane: 3, Period: p}
	assert.Equal(t, Key{PK: "TENANT#acme#ROLLUP#BRL#3", SK: "MONTHLY#2026-11"}, rk.Key())
	assert.Equal(t, Key{PK: "TENANT#acme#ROLLUP#BRL#3", SK: "MONTHLY#2026-11#cat#rent"}, rk.EntryKey(ByCategory, "rent"))
	assert.Equal(t, Key{PK: "TENANT#acme#ROLLUP#BRL#3", SK: "PARKED#MONTHLY#2026-11#c1"}, rk.ParkedKey("c1"))
	assert.Equal(t, Key{PK: "TENANT#acme#ROLLUPLANE#5", SK: "shard-1#42#BRL#0"}, RollupDeltaKey("acme", 5, "shard-1#42", "BRL", 0))
	assert.Len(t, RollupKeys("acme", "BRL", p), RollupLanes)
}

func TestRollupKeys_RefuseEveryOtherForm(t *testing.T) {
	lanePKs := []string{
		"TENANT#acme#ROLLUPLANE#32", // lane ≥ K
		"TENANT#acme#ROLLUPLANE#-1",
		"TENANT#acme#ROLLUPLANE#01", // leading zero: another key for lane 1
		"TENANT#acme#ROLLUPLANE#",
		"TENANT#acme#ROLLUPLANE#x",
		"TENANT##ROLLUPLANE#1",
		"TENANT#acme#BRANCH#b#ROLLUPLANE#1", // tenant with '#'
		"TENANT#acme#BRANCH#b#REPORTING",
		"RUN#x",
	}
	for _, pk := range lanePKs {
		assert.False(t, IsRollupLaneKey(pk), pk)
	}
	partialPKs := []string{
		"TENANT#acme#ROLLUP#BRL#32",
		"TENANT#acme#ROLLUP#BRL#007",
		"TENANT#acme#ROLLUP#brl#1", // not an ISO code as stored
		"TENANT#acme#ROLLUP#XXX#1", // no money
		"TENANT#acme#ROLLUP#BRL",
		"TENANT#acme#ROLLUP##1",
		"TENANT#acme#BRANCH#b#REPORTING",
	}
	for _, pk := range partialPKs {
		_, _, _, ok := ParseRollupPK(pk)
		assert.False(t, ok, pk)
	}
	// Malformed partials still look like partials: reconcile names them strays.
	assert.True(t, IsRollupPK("TENANT#acme#ROLLUP#BRL#32"))
	assert.False(t, IsRollupPK("TENANT#acme#BRANCH#b#REPORTING"))
	_, err := ParseRollupKey(Key{PK: "TENANT#acme#ROLLUP#BRL#1", SK: "MONTHLY#2026-13"})
	assert.Error(t, err)
}

func TestRollupLane_IsStableAndInRange(t *testing.T) {
	seen := map[int]bool{}
	for i := range 1000 {
		k := RollupLane("shardId-" + string(rune('a'+i%26)) + "#" + string(rune('0'+i%10)) + "#" + string(rune(i)))
		require.GreaterOrEqual(t, k, 0)
		require.Less(t, k, RollupLanes)
		seen[k] = true
	}
	assert.Len(t, seen, RollupLanes, "1,000 claims reach every lane")
	assert.Equal(t, RollupLane("shard-1#42#0"), RollupLane("shard-1#42#0"))
}
