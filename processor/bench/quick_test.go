package bench_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor/bench"
)

func TestQuick_RunsEveryMeasurementInUnderAMinute(t *testing.T) {
	cfg := bench.Quick()
	cfg.Log = os.Stderr
	start := time.Now()
	res, err := bench.Run(context.Background(), cfg)
	require.NoError(t, err)
	t.Logf("took %s\n%s", time.Since(start), res)
}
