package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// Exit statuses.
const (
	exitOK    = 0 // drained, or stopped by SIGTERM/SIGINT after a clean hand-off
	exitError = 1 // refused to start (no table, no stream) or failed while running
	exitUsage = 2 // bad flags or environment
	// exitOwnerInUse: another live poller process given the same --owner
	// claimed its worker item after this one (poller.OwnerInUseError), or
	// a drain found a live poller of its name; this one stopped. A
	// supervisor should not restart it under the same name (systemd:
	// RestartPreventExitStatus=3): the restarted process would claim the
	// name back, and the two would stop each other by turns.
	exitOwnerInUse = 3
	// exitDrainLost: a drain whose work is complete met records it could
	// not commit (poller.ErrDrainLost): trimmed by the stream's retention
	// before it reached them, or in a shard gone from the stream before it
	// was finished. Everything else readable at its start is committed;
	// the named records are lost to the reports until `ledgerctl reconcile
	// --repair` (docs/runbook.md, "Draining with `poller --drain`").
	exitDrainLost = 4
)

// options are the command line, after environment fallbacks.
type options struct {
	table              string
	coordination       string
	metricsAddr        string
	startPosition      poller.StartPosition
	idleBackoff        time.Duration
	maxIdleBackoff     time.Duration
	maxHeldRecords     int
	drainEmptyPages    int
	maxHeldBytes       int
	leaseScanPage      int
	describeRate       int
	coordWriteRate     int
	leaseMode          poller.LeaseMode
	leaseDuration      time.Duration
	checkpointInterval time.Duration
	discoverInterval   time.Duration
	shutdownTimeout    time.Duration
	owner              string
	logFormat          string
	logLevel           slog.Level
	drain              bool
	rollups            bool // tenant roll-ups kept (--rollups, default true)
	batchRecords       int
	batchWindow        time.Duration // negative: no window
	offerWatch         time.Duration // negative: off
}

const usageHead = `usage: poller [flags]

Reads the ledger table's DynamoDB stream and commits report updates exactly
once. Run several for availability: they share the shards through leases in
the table. Exits 0 on SIGTERM/SIGINT after committing what it holds and
releasing its leases (within 30 s), or with --drain once every record
readable in the stream at its start is committed; 1 when it cannot start (unknown table, no stream, wrong
stream view type) or fails; 2 on bad flags; 3 when another live poller
process uses the same --owner (owners must be unique: the newer process
keeps the name, the older stops); 4 when a drain's work is done but it met
records it could not commit (trimmed by the stream's retention before it
reached them, or in a shard gone from the stream unfinished, or in a gap
another consumer counted during the drain: named on stderr, lost to the
reports until ` + "`ledgerctl reconcile --repair`" + `).

AWS access comes from the standard SDK environment: AWS_REGION,
AWS_ENDPOINT_URL (e.g. a DynamoDB Local), credentials.

Flags (each falls back to the environment variable named, then the default):
`

// defaultOwner is the poller's name in lease items when none is given:
// the host name, the process id and 8 random hex digits. Host name and
// process id alone are not unique: containers sharing their host's network
// (ECS host mode, docker --network host) share its host name, and each
// runs its process as pid 1. Two live pollers of one name each take the
// other's leases for their own previous life's and its renewals for their
// own whose answers were lost, so both read every shard either holds
// (review, session 15; docs/exactly-once.md, "Leases").
func defaultOwner(host string) string {
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(uint64(rand.Uint32()), 16)
}

// parseFlags parses args with environment fallbacks. The error is a usage
// error; flag.ErrHelp when help was asked for.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("poller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "poller"
	}
	var describeRate string
	var coordWriteRate string
	var startPos, idle, maxIdle, drainPages, held, heldBytes, scanPage, lease, cpEvery, discover, shutdown, level, batch, window, watch string
	var errs []error
	drainDefault, err := strconv.ParseBool(env("LEDGER_DRAIN", "false"))
	if err != nil {
		errs = append(errs, fmt.Errorf("LEDGER_DRAIN %q: want true or false", getenv("LEDGER_DRAIN")))
	}
	rollupsDefault, err := strconv.ParseBool(env("LEDGER_ROLLUPS", "true"))
	if err != nil {
		errs = append(errs, fmt.Errorf("LEDGER_ROLLUPS %q: want true or false", getenv("LEDGER_ROLLUPS")))
	}
	fs.StringVar(&o.table, "table", env("LEDGER_TABLE", table.DefaultTableName), "the ledger `TABLE` (env LEDGER_TABLE)")
	fs.StringVar(&o.coordination, "coordination-table", env("LEDGER_COORDINATION_TABLE", ""),
		"the `TABLE` of checkpoints and leases, without a stream (default: the ledger table's name + \""+table.CoordinationSuffix+"\"; env LEDGER_COORDINATION_TABLE)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", env("LEDGER_METRICS_ADDR", ":9102"),
		"`ADDR` serving /metrics, /healthz and /readyz; port 0 picks a free port, which is logged (env LEDGER_METRICS_ADDR)")
	fs.StringVar(&startPos, "start-position", env("LEDGER_START_POSITION", string(poller.TrimHorizon)),
		"`POSITION` of shards that have no checkpoint: TRIM_HORIZON (everything the stream holds) or LATEST (then run 'ledgerctl reconcile --repair' once caught up) (env LEDGER_START_POSITION)")
	fs.StringVar(&idle, "idle-backoff", env("LEDGER_IDLE_BACKOFF", poller.IdleBackoffSetting.Default.String()),
		"the fast polling interval (a `DURATION`, e.g. 500ms) of a shard whose pages are empty; a page with records brings a shard back to it (env LEDGER_IDLE_BACKOFF)")
	fs.StringVar(&maxIdle, "max-idle-backoff", env("LEDGER_MAX_IDLE_BACKOFF", ""),
		"longest wait (a `DURATION`, at most 10m; default 10s, or --idle-backoff if longer) between two polls of a shard that stays idle: past --idle-backoff the wait doubles per empty page up to it. An idle shard costs about 1 GetRecords per 0.875 of it; the first write after a quiet period waits up to it longer. Equal to --idle-backoff: no growth (env LEDGER_MAX_IDLE_BACKOFF)")
	fs.StringVar(&held, "max-held-records", env("LEDGER_MAX_HELD_RECORDS", strconv.Itoa(poller.MaxHeldRecordsSetting.Default)),
		"most stream `RECORDS` in memory across all the shards this poller reads (reads in flight, batches gathered and being committed): shards wait for it in turn and read smaller pages when it is short (env LEDGER_MAX_HELD_RECORDS)")
	fs.StringVar(&scanPage, "lease-scan-page", env("LEDGER_LEASE_SCAN_PAGE", strconv.Itoa(poller.LeaseScanPageSetting.Default)),
		"lease `ITEMS` read per renewal round from the stream's lease partition, a sweep going on from where the last page ended (all of it at start): finds free and expired leases and new shards; a poller that died without releasing its leases has them taken over within --lease-duration plus two turns of the sweep (env LEDGER_LEASE_SCAN_PAGE)")
	fs.StringVar(&describeRate, "describe-rate", env("LEDGER_DESCRIBE_RATE", strconv.Itoa(poller.DescribeRateSetting.Default)),
		"DescribeStream calls a `SECOND` the whole fleet makes on the stream (AWS allows 10 per stream): each poller calls at most this divided by the live pollers, slower when throttled (env LEDGER_DESCRIBE_RATE)")
	fs.StringVar(&coordWriteRate, "coordination-write-rate", env("LEDGER_COORDINATION_WRITE_RATE", strconv.Itoa(poller.CoordinationWriteRateSetting.Default)),
		"write `UNITS` a second the whole fleet allows itself in each of the stream's two coordination partitions (leases; worker items) for takes, releases, registrations, offers and their clears (one AWS partition takes 1,000): each poller writes at most this divided by the live pollers; heartbeats and lease renewals are never paced (env LEDGER_COORDINATION_WRITE_RATE; docs/runbook.md, \"A hot coordination key\")")
	leaseMode := fs.String("lease-mode", env("LEDGER_LEASE_MODE", string(poller.LeaseModeHeartbeat)),
		"how this poller keeps its leases: `MODE` heartbeat (one worker item write a round keeps them all) or renew (every lease item written each round, as pollers before the heartbeat; more writes on the lease partition) (env LEDGER_LEASE_MODE; docs/runbook.md, \"Lease churn\")")
	fs.StringVar(&heldBytes, "max-held-bytes", env("LEDGER_MAX_HELD_BYTES", strconv.Itoa(poller.MaxHeldBytesSetting.Default)),
		"most `BYTES` (wire size, at least 1048576) of stream records in memory across all the shards this poller reads: each read takes 1 MiB, AWS's most per GetRecords response, and keeps what its page held; bounds memory when records are large (env LEDGER_MAX_HELD_BYTES)")
	fs.StringVar(&lease, "lease-duration", env("LEDGER_LEASE_DURATION", poller.LeaseDurationSetting.Default.String()),
		"`DURATION` a shard lease lasts without renewal; renewed every third of it, taken over by another poller after it (env LEDGER_LEASE_DURATION)")
	fs.StringVar(&cpEvery, "checkpoint-interval", env("LEDGER_CHECKPOINT_INTERVAL", poller.CheckpointIntervalSetting.Default.String()),
		"`DURATION` between moves of a shard's checkpoint over records that had no effect (env LEDGER_CHECKPOINT_INTERVAL)")
	fs.StringVar(&discover, "discover-interval", env("LEDGER_DISCOVER_INTERVAL", poller.DiscoverIntervalSetting.Default.String()),
		"`DURATION` between listings of the whole stream; in between, new shards are found as children of finished shards (env LEDGER_DISCOVER_INTERVAL)")
	fs.StringVar(&shutdown, "shutdown-timeout", env("LEDGER_SHUTDOWN_TIMEOUT", poller.ShutdownTimeoutSetting.Default.String()),
		"on SIGTERM, the `DURATION` (at most 25s) the batches in hand may take to commit before they are abandoned (env LEDGER_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&o.owner, "owner", env("LEDGER_OWNER", defaultOwner(host)),
		"this poller's `NAME` in lease items; must be unique among live pollers (env LEDGER_OWNER; default hostname-pid-random)")
	fs.StringVar(&o.logFormat, "log-format", env("LEDGER_LOG_FORMAT", "text"), "log `FORMAT` on stderr: text or json (env LEDGER_LOG_FORMAT)")
	fs.StringVar(&level, "log-level", env("LEDGER_LOG_LEVEL", "info"), "log `LEVEL`: debug, info, warn or error (env LEDGER_LOG_LEVEL)")
	fs.StringVar(&batch, "batch-records", env("LEDGER_BATCH_RECORDS", strconv.Itoa(poller.BatchRecordsSetting.Default)),
		"most `RECORDS` (1000 to 10000) folded into one commit batch: while a shard is behind, pages of 1,000 are read on into one batch, fewer report updates per record; up to 10 MB of records held per shard (env LEDGER_BATCH_RECORDS)")
	fs.StringVar(&window, "batch-window", env("LEDGER_BATCH_WINDOW", poller.BatchWindowSetting.Default.String()),
		"how long (a `DURATION`, at most 5m; 0 for none) a caught-up shard's reader holds the records it reads before committing them as one batch (bounded by --batch-records): fewer report writes per change, up to this much more lag (env LEDGER_BATCH_WINDOW)")
	fs.StringVar(&watch, "offer-watch", env("LEDGER_OFFER_WATCH", poller.OfferWatchSetting.Default.String()),
		"how often (a `DURATION`, 100ms to 1m; 0 for never) a poller reads its own worker item for leases handed to it, and takes them at once: a shard changing hands is read by nobody until its receiver takes it, up to two renewal intervals later without it. One consistent read of a small item each time (env LEDGER_OFFER_WATCH)")
	fs.StringVar(&drainPages, "drain-empty-pages", env("LEDGER_DRAIN_EMPTY_PAGES", strconv.Itoa(poller.DrainEmptyPagesSetting.Default)),
		"with --drain: empty `PAGES` in a row (1 to 100) an open shard must answer before the drain takes its current end as reached. AWS documents that an empty page is no proof of it (\"it might take multiple calls to get to a portion of the shard that contains stream records\"); each more page is one GetRecords per open shard (env LEDGER_DRAIN_EMPTY_PAGES)")
	fs.BoolVar(&o.drain, "drain", drainDefault,
		"exit 0 once every record readable in the stream at its start is committed (4 once the rest is, when some were trimmed or in a shard gone before it read them); takes over expired leases too (env LEDGER_DRAIN)")
	fs.BoolVar(&o.rollups, "rollups", rollupsDefault,
		"keep the tenant roll-ups (false: commits put no roll-up delta and fold none; turning them on again needs the quiescent repair of docs/runbook.md, \"Turning tenant roll-ups on or off\") (env LEDGER_ROLLUPS)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHead)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}

	if strings.TrimSpace(o.table) == "" {
		errs = append(errs, errors.New("--table: must not be empty"))
	}
	if strings.TrimSpace(o.owner) == "" {
		errs = append(errs, errors.New("--owner: must not be empty"))
	}
	if o.startPosition, err = poller.ParseStartPosition(startPos); err != nil {
		errs = append(errs, fmt.Errorf("--start-position: %w", err))
	}
	durFlag := func(v string, dst *time.Duration, s poller.Setting[time.Duration]) {
		d, err := time.ParseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: not a duration (e.g. 500ms, 2s)", s.Name, v))
			return
		}
		if d == 0 {
			errs = append(errs, fmt.Errorf("--%s 0s: want between %s and %s", s.Name, s.Min, s.Max))
			return
		}
		if *dst, err = s.Check(d); err != nil {
			errs = append(errs, fmt.Errorf("--%w", err))
		}
	}
	intFlag := func(v string, dst *int, s poller.Setting[int]) {
		n, err := strconv.Atoi(v)
		if err != nil || n < s.Min || n > s.Max {
			errs = append(errs, fmt.Errorf("--%s %q: want a number from %d to %d", s.Name, v, s.Min, s.Max))
			return
		}
		*dst = n
	}
	durFlag(idle, &o.idleBackoff, poller.IdleBackoffSetting)
	if maxIdle != "" {
		durFlag(maxIdle, &o.maxIdleBackoff, poller.MaxIdleBackoffSetting)
		if o.maxIdleBackoff > 0 && o.idleBackoff > 0 && o.maxIdleBackoff < o.idleBackoff {
			errs = append(errs, fmt.Errorf("--max-idle-backoff %s: want at least --idle-backoff %s", o.maxIdleBackoff, o.idleBackoff))
		}
	}
	intFlag(heldBytes, &o.maxHeldBytes, poller.MaxHeldBytesSetting)
	intFlag(scanPage, &o.leaseScanPage, poller.LeaseScanPageSetting)
	intFlag(describeRate, &o.describeRate, poller.DescribeRateSetting)
	intFlag(coordWriteRate, &o.coordWriteRate, poller.CoordinationWriteRateSetting)
	switch m := poller.LeaseMode(*leaseMode); m {
	case poller.LeaseModeHeartbeat, poller.LeaseModeRenew:
		o.leaseMode = m
	default:
		errs = append(errs, fmt.Errorf("--lease-mode %q: want %s or %s", *leaseMode, poller.LeaseModeHeartbeat, poller.LeaseModeRenew))
	}
	intFlag(held, &o.maxHeldRecords, poller.MaxHeldRecordsSetting)
	intFlag(batch, &o.batchRecords, poller.BatchRecordsSetting)
	intFlag(drainPages, &o.drainEmptyPages, poller.DrainEmptyPagesSetting)
	if d, err := time.ParseDuration(window); err == nil && d == 0 {
		o.batchWindow = -1 // no window: every page is committed as it is read
	} else {
		durFlag(window, &o.batchWindow, poller.BatchWindowSetting)
	}
	if d, err := time.ParseDuration(watch); err == nil && d == 0 {
		o.offerWatch = -1 // never: offers are taken at the round after the heartbeat that shows them
	} else {
		durFlag(watch, &o.offerWatch, poller.OfferWatchSetting)
	}
	durFlag(lease, &o.leaseDuration, poller.LeaseDurationSetting)
	durFlag(cpEvery, &o.checkpointInterval, poller.CheckpointIntervalSetting)
	durFlag(discover, &o.discoverInterval, poller.DiscoverIntervalSetting)
	durFlag(shutdown, &o.shutdownTimeout, poller.ShutdownTimeoutSetting)
	switch o.logFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("--log-format %q: want text or json", o.logFormat))
	}
	if err := o.logLevel.UnmarshalText([]byte(level)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", level))
	}
	if _, _, err := net.SplitHostPort(o.metricsAddr); err != nil {
		errs = append(errs, fmt.Errorf("--metrics-addr %q: want host:port (e.g. :9102, 127.0.0.1:0)", o.metricsAddr))
	}
	return o, errors.Join(errs...)
}

// Run runs the poller with args (without the program name) and returns its
// exit status. getenv supplies the environment (flags fall back to it, and
// AWS configuration is read from it where the SDK allows: see infra.LoadConfig).
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "poller: %v\n\nRun 'poller --help' for the flags.\n", err)
		return exitUsage
	}
	log := newLogger(o, stderr)
	if err := run(ctx, o, awsOptions(getenv), log); err != nil {
		return failed(err, log, stderr)
	}
	return exitOK
}

// failed is the exit status of a run that ended with err, and what it
// says about it: exitOwnerInUse for a poller.OwnerInUseError,
// exitDrainLost for a poller.DrainLossError (a drain whose work is done
// but that met records it could not commit), exitError otherwise.
func failed(err error, log *slog.Logger, stderr io.Writer) int {
	var inUse *poller.OwnerInUseError
	if errors.As(err, &inUse) {
		log.Error("poller stopped: its owner name is in use by another live poller process", "owner", inUse.Owner,
			"incarnation", inUse.Mine, "other_incarnation", inUse.Theirs, "error", err.Error())
		fmt.Fprintf(stderr, "poller: %v\n\nOwners must be unique among the live pollers and drains of a stream: give each its own --owner (LEDGER_OWNER), or leave it unset (hostname-pid-random). Do not restart this process under the same name: the two would stop each other by turns (docs/runbook.md, \"Two pollers with one owner\").\n", err)
		return exitOwnerInUse
	}
	var lost *poller.DrainLossError
	if errors.As(err, &lost) {
		fmt.Fprintf(stderr, "poller: %v\n\nEvery other record readable in the stream at the drain's start is committed. The records named are lost to the reports: stop the writes if they run, then run `ledgerctl reconcile --repair` (docs/runbook.md, \"Draining with `poller --drain`\").\n", err)
		return exitDrainLost
	}
	log.Error("poller failed", "error", err.Error())
	return exitError
}

func newLogger(o options, w io.Writer) *slog.Logger {
	hopts := &slog.HandlerOptions{Level: o.logLevel}
	if o.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, hopts))
	}
	return slog.New(slog.NewTextHandler(w, hopts))
}

// awsOptions passes the AWS settings found through getenv to the SDK, which
// otherwise reads the process environment only (so that Run called
// in-process honours its getenv).
func awsOptions(getenv func(string) string) []func(*config.LoadOptions) error {
	var opts []func(*config.LoadOptions) error
	if ep := getenv("AWS_ENDPOINT_URL"); ep != "" {
		opts = append(opts, config.WithBaseEndpoint(ep))
	}
	if region := getenv("AWS_REGION"); region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	return opts
}

func run(ctx context.Context, o options, awsOpts []func(*config.LoadOptions) error, log *slog.Logger) error {
	cfg, err := infra.LoadConfig(ctx, awsOpts...)
	if err != nil {
		return err
	}
	svc, err := poller.NewService(ctx, cfg, poller.Config{
		Table:                 o.table,
		CoordinationTable:     o.coordination,
		Owner:                 o.owner,
		StartPosition:         o.startPosition,
		Drain:                 o.drain,
		DrainEmptyPages:       o.drainEmptyPages,
		NoRollups:             !o.rollups,
		BatchRecords:          o.batchRecords,
		BatchWindow:           o.batchWindow,
		OfferWatch:            o.offerWatch,
		IdleBackoff:           o.idleBackoff,
		MaxIdleBackoff:        o.maxIdleBackoff,
		MaxHeldRecords:        o.maxHeldRecords,
		MaxHeldBytes:          o.maxHeldBytes,
		LeaseScanPage:         o.leaseScanPage,
		DescribeRate:          o.describeRate,
		CoordinationWriteRate: o.coordWriteRate,
		LeaseMode:             o.leaseMode,
		LeaseDuration:         o.leaseDuration,
		CheckpointInterval:    o.checkpointInterval,
		DiscoverInterval:      o.discoverInterval,
		ShutdownTimeout:       o.shutdownTimeout,
		Logger:                log,
	})
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 5 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("serving metrics", "addr", ln.Addr().String(), "table", o.table, "stream", svc.StreamARN)

	runErr := svc.Poller.Run(ctx)

	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutCtx)
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		runErr = errors.Join(runErr, fmt.Errorf("metrics server: %w", err))
	}
	if runErr == nil {
		log.Info("poller exiting", "drain", o.drain)
	}
	return runErr
}
