package main

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/handler"
	"github.com/ledger-dev/ledger/table"
)

// config is everything the function reads from its environment, validated.
type config struct {
	processor    processor.Config
	mode         handler.Mode
	batchRecords int
	margin       time.Duration
	functionName string
	logLevel     slog.Level
	// esmCheck is LEDGER_ESM_CHECK (esmEnforce, esmWarn, esmOff) and
	// esmInterval how often the mappings are read again.
	esmCheck    string
	esmInterval time.Duration
}

// The variables the function reads, with their defaults; the usage text
// and docs/lambda.md list the same.
const envHelp = `ledger's Lambda stream consumer reads its configuration from the environment:
  LEDGER_TABLE                 table name (default "ledger")
  LEDGER_COORDINATION_TABLE    table of the shards' checkpoints, without a stream (default: LEDGER_TABLE + "-coordination")
  LEDGER_LAMBDA_MODE           standard | tumbling (default standard; must match the event source mapping)
  LEDGER_MAX_ATTEMPTS          attempts of every DynamoDB call, 1-1000 (default 10)
  LEDGER_BASE_BACKOFF          first retry backoff, a Go duration (default 25ms)
  LEDGER_MAX_BACKOFF           largest retry backoff (default 3s)
  LEDGER_MAX_ITEMS_PER_RUN     report items per commit transaction, 1-99 (default 99)
  LEDGER_MAX_ENTRIES_PER_ITEM  breakdown entries per report update, 1-32 (default 32)
  LEDGER_MARKER_TTL            run marker lifetime, at least 25h (default 168h)
  LEDGER_SHAPE_CACHE_SIZE      report shapes kept in memory, 1-10000000 (default 50000)
  LEDGER_BATCH_RECORDS         tumbling mode: records per commit batch, and per window before an early commit, 100-100000 (default 10000)
  LEDGER_DEADLINE_MARGIN       stop committing this long before the invocation's deadline (default 2s)
  LEDGER_LOG_LEVEL             debug | info | warn | error (default info)
  LEDGER_ESM_CHECK             enforce | warn | off: refuse to run with unsafe event source mapping settings,
                               or when they cannot be read (default enforce; docs/lambda.md)
  LEDGER_ESM_CHECK_INTERVAL    how often the mapping settings are read again, 10s-24h (default 5m)
plus the standard AWS SDK environment (AWS_REGION, AWS_ENDPOINT_URL, credentials).`

var tableName = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,255}$`)

// loadConfig reads and validates the configuration. The error lists every
// bad variable, each with its value and what is accepted.
func loadConfig(getenv func(string) string) (config, error) {
	var errs []string
	bad := func(name, value, want string) {
		errs = append(errs, fmt.Sprintf("%s=%q: want %s", name, value, want))
	}
	intVar := func(name string, def, lo, hi int) int {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			bad(name, v, fmt.Sprintf("an integer from %d to %d", lo, hi))
			return def
		}
		return n
	}
	durVar := func(name string, def, lo, hi time.Duration) time.Duration {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < lo || d > hi {
			bad(name, v, fmt.Sprintf("a duration from %s to %s (e.g. 250ms, 3s)", lo, hi))
			return def
		}
		return d
	}

	c := config{functionName: getenv("AWS_LAMBDA_FUNCTION_NAME")}
	c.processor.Table = strings.TrimSpace(getenv("LEDGER_TABLE"))
	if c.processor.Table == "" {
		c.processor.Table = table.DefaultTableName
	} else if !tableName.MatchString(c.processor.Table) {
		bad("LEDGER_TABLE", c.processor.Table, "a DynamoDB table name (3-255 letters, digits, _ . -)")
	}
	c.processor.CoordinationTable = strings.TrimSpace(getenv("LEDGER_COORDINATION_TABLE"))
	if c.processor.CoordinationTable == "" {
		c.processor.CoordinationTable = table.CoordinationTableName(c.processor.Table)
	} else if !tableName.MatchString(c.processor.CoordinationTable) || c.processor.CoordinationTable == c.processor.Table {
		bad("LEDGER_COORDINATION_TABLE", c.processor.CoordinationTable, "a DynamoDB table name (3-255 letters, digits, _ . -) other than LEDGER_TABLE's")
	}
	switch mode := strings.TrimSpace(getenv("LEDGER_LAMBDA_MODE")); mode {
	case "", string(handler.Standard):
		c.mode = handler.Standard
	case string(handler.Tumbling):
		c.mode = handler.Tumbling
	default:
		bad("LEDGER_LAMBDA_MODE", mode, `"standard" or "tumbling"`)
	}
	c.processor.MaxAttempts = intVar("LEDGER_MAX_ATTEMPTS", 10, 1, 1000)
	c.processor.BaseBackoff = durVar("LEDGER_BASE_BACKOFF", 25*time.Millisecond, time.Millisecond, time.Minute)
	c.processor.MaxBackoff = durVar("LEDGER_MAX_BACKOFF", 3*time.Second, time.Millisecond, 5*time.Minute)
	if c.processor.MaxBackoff < c.processor.BaseBackoff {
		bad("LEDGER_MAX_BACKOFF", getenv("LEDGER_MAX_BACKOFF"), fmt.Sprintf("at least LEDGER_BASE_BACKOFF (%s)", c.processor.BaseBackoff))
	}
	c.processor.MaxItemsPerRun = intVar("LEDGER_MAX_ITEMS_PER_RUN", 99, 1, 99)
	c.processor.MaxEntriesPerItem = intVar("LEDGER_MAX_ENTRIES_PER_ITEM", table.MaxInlineEntries, 1, table.MaxInlineEntries)
	c.processor.MarkerTTL = durVar("LEDGER_MARKER_TTL", 7*24*time.Hour, 25*time.Hour, 365*24*time.Hour)
	c.processor.ShapeCacheSize = intVar("LEDGER_SHAPE_CACHE_SIZE", 50000, 1, 10_000_000)
	switch v := strings.ToLower(strings.TrimSpace(getenv("LEDGER_ROLLUPS"))); v {
	case "", "true":
	case "false":
		c.processor.NoRollups = true // docs/runbook.md, "Turning tenant roll-ups on or off"
	default:
		bad("LEDGER_ROLLUPS", v, "true or false")
	}
	c.batchRecords = intVar("LEDGER_BATCH_RECORDS", handler.DefaultBatchRecords, handler.MinBatchRecords, handler.MaxBatchRecords)
	c.margin = durVar("LEDGER_DEADLINE_MARGIN", handler.DefaultDeadlineMargin, 0, 5*time.Minute)
	switch v := strings.ToLower(strings.TrimSpace(getenv("LEDGER_ESM_CHECK"))); v {
	case "", esmEnforce:
		c.esmCheck = esmEnforce
	case esmWarn, esmOff:
		c.esmCheck = v
	default:
		bad("LEDGER_ESM_CHECK", v, "enforce, warn or off")
	}
	c.esmInterval = durVar("LEDGER_ESM_CHECK_INTERVAL", 5*time.Minute, 10*time.Second, 24*time.Hour)
	switch lvl := strings.ToLower(strings.TrimSpace(getenv("LEDGER_LOG_LEVEL"))); lvl {
	case "", "info":
		c.logLevel = slog.LevelInfo
	case "debug":
		c.logLevel = slog.LevelDebug
	case "warn", "warning":
		c.logLevel = slog.LevelWarn
	case "error":
		c.logLevel = slog.LevelError
	default:
		bad("LEDGER_LOG_LEVEL", lvl, "debug, info, warn or error")
	}
	if len(errs) > 0 {
		return c, errors.New("invalid configuration: " + strings.Join(errs, "; "))
	}
	return c, nil
}
