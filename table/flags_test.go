package table_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	ledgertable "github.com/ledger-dev/ledger/table"
)

func TestSetFlags_GuardedByVersionLostRaceIsReportedNotOverwritten(t *testing.T) {
	t.Parallel()
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	ctx := context.Background()
	f, err := ledgertable.GetFlags(ctx, c, table)
	require.NoError(t, err)
	require.True(t, f.Exists)

	got, err := ledgertable.SetFlags(ctx, c, table, map[string]bool{"maintenanceBanner": true}, f.Version, time.Now())
	require.NoError(t, err)
	assert.Equal(t, f.Version+1, got.Version)
	assert.True(t, got.Values["maintenanceBanner"])
	assert.True(t, got.WritesEnabled(), "other flags are left as they are")

	// A writer that read the old version loses: nothing is overwritten.
	_, err = ledgertable.SetFlags(ctx, c, table, map[string]bool{ledgertable.FlagWritesEnabled: false}, f.Version, time.Now())
	var conflict *ledgertable.FlagsConflictError
	require.True(t, errors.As(err, &conflict), "got %v", err)
	assert.Equal(t, f.Version+1, conflict.Current.Version)
	now, err := ledgertable.GetFlags(ctx, c, table)
	require.NoError(t, err)
	assert.True(t, now.WritesEnabled())
	assert.Equal(t, f.Version+1, now.Version)

	// Creating an item that exists is a lost race too.
	_, err = ledgertable.SetFlags(ctx, c, table, map[string]bool{ledgertable.FlagWritesEnabled: false}, 0, time.Now())
	require.True(t, errors.As(err, &conflict), "got %v", err)

	for _, name := range []string{"version", "PK", "Bad-Name", "", "entityType"} {
		_, err := ledgertable.SetFlags(ctx, c, table, map[string]bool{name: true}, now.Version, time.Now())
		assert.Error(t, err, name)
	}
}
