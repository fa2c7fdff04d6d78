package main

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor/handler"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestLoadConfig_DefaultsNeedNothingButTheSDKEnvironment(t *testing.T) {
	c, err := loadConfig(env(nil))
	require.NoError(t, err)
	assert.Equal(t, "ledger", c.processor.Table)
	assert.Equal(t, handler.Standard, c.mode)
	assert.Equal(t, 10, c.processor.MaxAttempts)
	assert.Equal(t, 25*time.Millisecond, c.processor.BaseBackoff)
	assert.Equal(t, 3*time.Second, c.processor.MaxBackoff)
	assert.Equal(t, 99, c.processor.MaxItemsPerRun)
	assert.Equal(t, 32, c.processor.MaxEntriesPerItem)
	assert.Equal(t, 7*24*time.Hour, c.processor.MarkerTTL)
	assert.Equal(t, 50000, c.processor.ShapeCacheSize)
	assert.Equal(t, handler.DefaultBatchRecords, c.batchRecords)
	assert.Equal(t, handler.DefaultDeadlineMargin, c.margin)
	assert.Equal(t, slog.LevelInfo, c.logLevel)
	assert.False(t, c.processor.NoRollups, "roll-ups on by default")
}

func TestLoadConfig_ReadsEveryVariable(t *testing.T) {
	c, err := loadConfig(env(map[string]string{
		"LEDGER_TABLE": "my-ledger.v2", "LEDGER_LAMBDA_MODE": "tumbling", "LEDGER_MAX_ATTEMPTS": "4",
		"LEDGER_BASE_BACKOFF": "10ms", "LEDGER_MAX_BACKOFF": "1s", "LEDGER_MAX_ITEMS_PER_RUN": "50",
		"LEDGER_MAX_ENTRIES_PER_ITEM": "8", "LEDGER_MARKER_TTL": "72h", "LEDGER_SHAPE_CACHE_SIZE": "100",
		"LEDGER_BATCH_RECORDS": "500", "LEDGER_DEADLINE_MARGIN": "500ms", "LEDGER_LOG_LEVEL": "debug",
		"AWS_LAMBDA_FUNCTION_NAME": "fn", "LEDGER_ROLLUPS": "false",
	}))
	require.NoError(t, err)
	assert.Equal(t, "my-ledger.v2", c.processor.Table)
	assert.Equal(t, handler.Tumbling, c.mode)
	assert.Equal(t, 4, c.processor.MaxAttempts)
	assert.Equal(t, 10*time.Millisecond, c.processor.BaseBackoff)
	assert.Equal(t, time.Second, c.processor.MaxBackoff)
	assert.Equal(t, 50, c.processor.MaxItemsPerRun)
	assert.Equal(t, 8, c.processor.MaxEntriesPerItem)
	assert.Equal(t, 72*time.Hour, c.processor.MarkerTTL)
	assert.Equal(t, 100, c.processor.ShapeCacheSize)
	assert.Equal(t, 500, c.batchRecords)
	assert.Equal(t, 500*time.Millisecond, c.margin)
	assert.Equal(t, slog.LevelDebug, c.logLevel)
	assert.Equal(t, "fn", c.functionName)
	assert.True(t, c.processor.NoRollups, "LEDGER_ROLLUPS=false")
}

func TestLoadConfig_RejectsBadValuesNamingEachOne(t *testing.T) {
	_, err := loadConfig(env(map[string]string{
		"LEDGER_LAMBDA_MODE": "batch", "LEDGER_MAX_ITEMS_PER_RUN": "100", "LEDGER_BASE_BACKOFF": "fast",
		"LEDGER_MAX_BACKOFF": "5ms", "LEDGER_LOG_LEVEL": "loud", "LEDGER_MAX_ENTRIES_PER_ITEM": "0", "LEDGER_ROLLUPS": "no",
	}))
	require.Error(t, err)
	for _, want := range []string{
		`LEDGER_LAMBDA_MODE="batch": want "standard" or "tumbling"`,
		`LEDGER_MAX_ITEMS_PER_RUN="100": want an integer from 1 to 99`,
		`LEDGER_BASE_BACKOFF="fast"`,
		`LEDGER_LOG_LEVEL="loud"`,
		`LEDGER_MAX_ENTRIES_PER_ITEM="0"`,
		`LEDGER_ROLLUPS="no": want true or false`,
	} {
		assert.Contains(t, err.Error(), want)
	}
	_, err = loadConfig(env(map[string]string{"LEDGER_BASE_BACKOFF": "1s", "LEDGER_MAX_BACKOFF": "100ms"}))
	assert.ErrorContains(t, err, `LEDGER_MAX_BACKOFF="100ms": want at least LEDGER_BASE_BACKOFF (1s)`)
}
