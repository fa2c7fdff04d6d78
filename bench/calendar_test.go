package bench

import (
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
)

// Stamping a workload stamps every transaction image, old and new, as the
// writer would (the periods of its createdAt in the calendar), changes
// nothing else, and leaves the workload it was given alone: one generated
// workload serves every variant of the period-types measurement.
func TestStamping_StampsEveryImageFromItsCreatedAtAndNothingElse(t *testing.T) {
	ops := WorkloadB.Generate(2000, 6)
	before := WorkloadB.Generate(2000, 6)
	s := Stamping{BenchCalendar(), sevenTypes}
	got, err := s.Stamp(ops)
	require.NoError(t, err)
	require.Len(t, got, len(ops))
	assert.Equal(t, before, ops, "the workload given is not changed")

	for i, op := range got {
		assert.Equal(t, ops[i].Kind, op.Kind)
		assert.Equal(t, ops[i].Key, op.Key)
		for _, pair := range [][2]map[string]ddbtypes.AttributeValue{{op.Old, ops[i].Old}, {op.New, ops[i].New}} {
			stamped, plain := pair[0], pair[1]
			if plain == nil {
				assert.Nil(t, stamped)
				continue
			}
			created, err := time.Parse(time.RFC3339Nano, str(plain["createdAt"]))
			require.NoError(t, err)
			// São Paulo keeps UTC−3 all year since 2019 and its business
			// day starts at 04:00: an instant's business date is the UTC
			// date 7 hours earlier.
			assert.Equal(t, created.Add(-7*time.Hour).Format("2006-01-02"), str(stamped["businessDate"]), "%s", plain["SK"])
			want, err := s.Calendar.Stamp(created, sevenTypes)
			require.NoError(t, err)
			assert.Equal(t, want.EncodePeriods(), str(stamped["periods"]))
			tx := txOf(stamped)
			require.NotNil(t, tx, "a valid transaction, as the consumers read it")
			assert.True(t, tx.Stamped)
			assert.True(t, tx.Stamp.Equal(want))
			rest := maps.Clone(stamped)
			delete(rest, "businessDate")
			delete(rest, "periods")
			assert.Equal(t, plain, rest, "only the stamp is added")
		}
	}
}

// A transaction at 02:30 in São Paulo on 1 March 2025 (05:30 UTC) belongs
// to the business day of 28 February, that day's week, month and quarter,
// and to the fiscal year from July 2024: FY2025.
func TestStamping_ABusinessDayBeforeItsCutOffBelongsToThePreviousDay(t *testing.T) {
	created := time.Date(2025, 3, 1, 5, 30, 0, 0, time.UTC)
	item := newTransaction(rand.New(rand.NewPCG(1, 2)), WorkloadB.pools(), "br0001", created, "x1")
	for _, c := range []struct {
		types []aggregates.PeriodType
		want  string
	}{
		{threeTypes, "DAILY#2025-02-28 MONTHLY#2025-02 YEARLY#2025"},
		{fiveTypes, "DAILY#2025-02-28 WEEKLY#2025-02-24 MONTHLY#2025-02 QUARTERLY#2025-Q1 YEARLY#2025"},
		{sevenTypes, "DAILY#2025-02-28 WEEKLY#2025-02-24 MONTHLY#2025-02 QUARTERLY#2025-Q1 YEARLY#2025 FISCAL_QUARTER#FY2025-Q3 FISCAL_YEAR#FY2025"},
	} {
		got, err := Stamping{BenchCalendar(), c.types}.Stamp([]Op{{Kind: OpInsert, New: item}})
		require.NoError(t, err)
		assert.Equal(t, "2025-02-28", str(got[0].New["businessDate"]))
		assert.Equal(t, c.want, str(got[0].New["periods"]))
	}
	_, err := Stamping{BenchCalendar(), sevenTypes}.Stamp([]Op{{Kind: OpInsert, New: map[string]ddbtypes.AttributeValue{"createdAt": sAV("yesterday")}}})
	assert.ErrorContains(t, err, "yesterday")
}
