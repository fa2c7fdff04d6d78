package poller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfig_DefaultsAndLimitsAreTheSettings(t *testing.T) {
	c, err := Config{Table: "t", StreamARN: "arn", Owner: "o"}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, IdleBackoffSetting.Default, c.IdleBackoff)
	assert.Equal(t, LeaseDurationSetting.Default, c.LeaseDuration)
	assert.Equal(t, ShutdownTimeoutSetting.Default, c.ShutdownTimeout)
	assert.Equal(t, BatchRecordsSetting.Default, c.BatchRecords)
	assert.Equal(t, MaxReadFailuresSetting.Default, c.MaxReadFailures)
	assert.Equal(t, BatchWindowSetting.Default, c.BatchWindow)
	assert.Equal(t, MaxIdleBackoffSetting.Default, c.MaxIdleBackoff)
	assert.Equal(t, MaxHeldRecordsSetting.Default, c.MaxHeldRecords)
	assert.Equal(t, MaxHeldBytesSetting.Default, c.MaxHeldBytes)
	assert.Equal(t, DrainEmptyPagesSetting.Default, c.DrainEmptyPages)
	slow, err := Config{Table: "t", StreamARN: "arn", Owner: "o", IdleBackoff: time.Minute}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, time.Minute, slow.MaxIdleBackoff, "the cap's default is never under the idle backoff")

	off, err := Config{Table: "t", StreamARN: "arn", Owner: "o", BatchWindow: -1}.withDefaults()
	require.NoError(t, err)
	assert.Negative(t, off.BatchWindow, "a negative window is no window, not the default")
	small, err := Config{Table: "t", StreamARN: "arn", Owner: "o", MaxRecords: 10}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, BatchRecordsSetting.Default, small.BatchRecords, "the batch default does not follow a smaller page")

	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"idle backoff under the minimum", func(c *Config) { c.IdleBackoff = time.Millisecond }, "idle-backoff 1ms: want between 10ms and 5m0s"},
		{"shutdown past the container's grace", func(c *Config) { c.ShutdownTimeout = 26 * time.Second }, "shutdown-timeout 26s: want between 1s and 25s"},
		{"lease too short", func(c *Config) { c.LeaseDuration = time.Millisecond }, "lease-duration 1ms: want between 300ms and 10m0s"},
		{"batch under a page", func(c *Config) { c.MaxRecords, c.BatchRecords = 1000, 999 }, "batch records 999: want 1000 (max records) to 10000"},
		{"batch window too long", func(c *Config) { c.BatchWindow = 6 * time.Minute }, "batch-window 6m0s: want between 1ms and 5m0s"},
		{"batch window under the minimum", func(c *Config) { c.BatchWindow = time.Microsecond }, "batch-window 1µs: want between 1ms and 5m0s"},
		{"batch over the maximum", func(c *Config) { c.BatchRecords = 10001 }, "batch records 10001: want 1000 (max records) to 10000"},
		{"max idle backoff under the idle backoff", func(c *Config) { c.IdleBackoff, c.MaxIdleBackoff = 2*time.Second, time.Second }, "max idle backoff 1s: want at least the idle backoff 2s"},
		{"max idle backoff past an iterator's life", func(c *Config) { c.MaxIdleBackoff = 20 * time.Minute }, "max-idle-backoff 20m0s: want between 10ms and 10m0s"},
		{"bytes budget under a page", func(c *Config) { c.MaxHeldBytes = 1000 }, "max-held-bytes 1000: want between 1048576 and 1099511627776"},
		{"negative records budget", func(c *Config) { c.MaxHeldRecords = -1 }, "max-held-records -1: want between 1 and 10000000"},
		{"drain empty pages over the maximum", func(c *Config) { c.DrainEmptyPages = 101 }, "drain-empty-pages 101: want between 1 and 100"},
		{"throttle backoffs crossed", func(c *Config) { c.ThrottleBackoff, c.MaxThrottleBackoff = time.Second, 500*time.Millisecond }, "max throttle backoff 500ms: want at least the throttle backoff 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Table: "t", StreamARN: "arn", Owner: "o"}
			tc.set(&c)
			_, err := c.withDefaults()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
