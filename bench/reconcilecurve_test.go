package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/processor"
)

// The reconcile curve's table holds the seeded transactions and their
// reports exactly, but for the four planted differences: a reconcile of it
// (here in-process, on DynamoDB Local, at a size it serves) counts every
// transaction and names exactly those four, so the curve's "0 differences
// but the planted ones" is a property of the loader, not of dynalite.
func TestLoadCurveTable_ReportsExactButThePlantedDifferences(t *testing.T) {
	ctx := context.Background()
	db := ddbtest.Client(t)
	table := ddbtest.NewTable(t, db)
	info, err := loadCurveTable(ctx, db, table, 3000, 25, 4, func(string, ...any) {})
	require.NoError(t, err)
	require.Len(t, info.Seeded, 4)
	assert.Equal(t, curveWorkload.Branches, info.Branches)

	diffs, stats, err := processor.ReconcileWith(ctx, db, table, processor.Scope{}, processor.ReconcileOptions{Parallel: 2})
	require.NoError(t, err)
	assert.Equal(t, 3000, stats.Transactions)
	assert.Zero(t, stats.Invalid)
	assert.Equal(t, info.Reports+2, stats.Reports, "the reports written, the wrong one and the orphan included")
	var found []string
	for _, d := range diffs {
		k := d.Report.Key()
		if d.Stray != nil {
			k = *d.Stray
		}
		found = append(found, k.PK+"|"+k.SK)
	}
	slices.Sort(found)
	assert.Equal(t, info.Seeded, found)
	for _, d := range diffs {
		if d.Stray == nil && strings.Contains(d.String(), "count") {
			return
		}
	}
	t.Errorf("no difference names the count one too high: %v", diffs)
}

// The curve's markdown row says whether reconcile found exactly the planted
// differences, and what it read.
func TestWriteReconcileCurve_NamesAMissedPlantedDifference(t *testing.T) {
	var b bytes.Buffer
	WriteReconcileCurve(&b, []ReconcilePoint{
		{Transactions: 100000, Branches: 50, Reports: 7000, Command: "ledgerctl reconcile --json", Took: 50 * time.Second, PeakRSS: 40 << 20,
			Counted: 100000, ItemsRead: 214000, ReadUnits: 12345.5, Seeded: []string{"a", "b"}, Found: []string{"a", "b"}, Exact: true, Loaded: true},
		{Transactions: 200000, Seeded: []string{"a", "b"}, Found: []string{"a"}, Took: time.Second},
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 4)
	assert.Equal(t, "| 100000 | 50 | 7002 | `ledgerctl reconcile --json` | 50s | 2000 | 40.0 MiB | 214000 | 12345.5 | 2 of 2, exactly those | 0s | 0 MiB | 0 MiB |", lines[2])
	assert.Contains(t, lines[3], "1 of 2, **not exactly those**")
	assert.Contains(t, lines[3], "(earlier run)")
}

// GNU time's %M is read from its last line (a command that exits non-zero,
// as reconcile does on a difference, gets a line about it first).
func TestReadMaxRSS_LastLineOfGNUTime(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		want    int64
		err     string
	}{
		{"26776\n", 26776 << 10, ""},
		{"Command exited with non-zero status 1\n268800\n", 268800 << 10, ""},
		{"Command terminated by signal 9\n", 0, "is not GNU time's %M"},
		{"", 0, "is not GNU time's %M"},
	} {
		f := filepath.Join(dir, "maxrss")
		require.NoError(t, os.WriteFile(f, []byte(tc.content), 0o644))
		got, err := readMaxRSS(f)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, "%q", tc.content)
			continue
		}
		require.NoError(t, err, "%q", tc.content)
		assert.Equal(t, tc.want, got, "%q", tc.content)
	}
	_, err := readMaxRSS(filepath.Join(dir, "missing"))
	assert.ErrorContains(t, err, "read peak RSS")
}

// dynalite's peak is its own high-water mark (VmHWM): this process's is
// at least its current resident set, and a process that is gone has none.
func TestVmHWM_OwnHighWaterMark(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("VmHWM is Linux's /proc")
	}
	assert.Greater(t, vmHWM(os.Getpid()), int64(1<<20))
	assert.Zero(t, vmHWM(-1))
}
