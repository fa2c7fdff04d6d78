package processor

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
)

// TestRollupCost_CountsByKindAndLogsTheHeaviestTenantPastTheThreshold: the
// units of one commit go to ledger_rollup_write_units_total by kind (no
// tenant label), and only a commit whose roll-up units for one tenant
// reach the threshold logs that tenant (the heaviest, once).
func TestRollupCost_CountsByKindAndLogsTheHeaviestTenantPastTheThreshold(t *testing.T) {
	cost := func() rollupCost {
		c := rollupCost{byKind: map[string]int{}, byTenant: map[string]int{}}
		c.add(RollupCostDeltaPut, "quiet", 900)        // 1 KB: 2 units
		c.add(RollupCostPartial, "loud", 30_000)       // 30 KB: 60 units
		c.add(RollupCostEntry, "loud", 1_500)          // 2 KB: 4 units
		c.add(RollupCostDeltaDelete, "quiet", 100_000) // 98 KB: 196 units
		return c
	}
	for _, tc := range []struct {
		name      string
		threshold int
		want      string // the logged tenant, "" for no line
	}{
		{"below", 199, ""},
		{"reached", 198, "tenant=quiet units=198 tenants=2"},
		{"off", -1, ""},
		{"zero is off too", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMetrics(nil)
			var buf bytes.Buffer
			cost().count(m, slog.New(slog.NewTextHandler(&buf, nil)), tc.threshold)
			for kind, want := range map[string]float64{RollupCostDeltaPut: 2, RollupCostPartial: 60, RollupCostEntry: 4, RollupCostDeltaDelete: 196} {
				assert.Equal(t, want, testutil.ToFloat64(m.RollupWriteUnits.WithLabelValues(kind)), kind)
			}
			if tc.want == "" {
				assert.Empty(t, buf.String())
				return
			}
			assert.Equal(t, 1, strings.Count(buf.String(), "\n"), buf.String())
			assert.Contains(t, buf.String(), tc.want)
		})
	}
}
