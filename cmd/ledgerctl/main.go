// Command ledgerctl is the operator's tool for a ledger table: create and
// describe the table, and reconcile reports against the transactions.
//
// It reads the table name from LEDGER_TABLE (default "ledger") and talks to
// DynamoDB through the standard AWS SDK environment (AWS_REGION,
// AWS_ENDPOINT_URL, credentials), so pointing it at DynamoDB Local needs no
// flag of its own.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	ledgertable "github.com/ledger-dev/ledger/table"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses, like diff(1): 0 nothing to report, 1 differences found,
// 2 trouble (bad usage, unreachable table, any error).
const (
	exitOK    = 0
	exitDiff  = 1
	exitError = 2
)

const usage = `usage: ledgerctl COMMAND [flags]

Commands:
  table create      create the table (keys, GSI1, GSI2, stream, TTL, default flags) and its
                    coordination table (checkpoints and leases, no stream) if absent
  table describe    print the table's definition and check it and the coordination table
  coordination migrate   move the stream's checkpoints from the ledger table to the coordination
                    table (from a version before it; with every consumer stopped)
  reconcile         recompute reports from transactions and print the differences
                    (--repair --rebase --tenant T --branch B: rebase one branch while the consumers run)
  flags get         print the flags singleton (writesEnabled, version)
  flags set N=B ... set flags, guarded by the version read (a lost race writes nothing, exit 1)
  token --tenant T  mint a bearer token for the writer from LEDGER_JWT_SECRET (local use; --admin: admin scope)
  tenant|branch|account create|get|list   manage the directory through the writer's API (LEDGER_WRITER_URL);
                    tenant|branch update: a tenant's report periods, a branch's calendar, names, status
  run               run ledger locally: DynamoDB Local, table, writer, poller, sample, reports
  report            print a branch's reports as a table or JSON
  rebucket          move a tenant's (or a branch's) history into its current business calendar
  compact           retire the tombstones of deleted transactions older than the stream's retention
  replay FILE|DIR   push recorded stream events (Lambda JSON) through the processor
  parked            list the report deltas the consumers parked (reconcile --repair heals them)
  lag               per-shard position of the stream's consumer: pending records and their age
  abandon-batch     give up a shard's half-committed batch that cannot finish (lostAt, loss count;
                    its records are lost to the reports until reconcile --repair)
  unfence           with every consumer stopped, put checkpoints and report heads back in the
                    layouts of protocol 3 and the flags' protocol back to 3 (a rollback below 4)

Environment:
  LEDGER_TABLE      table name (default "ledger")
  LEDGER_COORDINATION_TABLE  the consumers' checkpoints and leases (default: LEDGER_TABLE + "-coordination")
  LEDGER_JWT_SECRET the writer's HS256 secret (token)
  AWS_REGION, AWS_ENDPOINT_URL, AWS credentials: the standard AWS SDK settings

Run 'ledgerctl COMMAND -h' for a command's flags.
`

// Run runs ledgerctl with args (without the program name) and returns its
// exit status. getenv supplies the environment.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError
	}
	table := getenv("LEDGER_TABLE")
	if table == "" {
		table = "ledger"
	}
	coordination := getenv("LEDGER_COORDINATION_TABLE")
	if coordination == "" {
		coordination = ledgertable.CoordinationTableName(table)
	}
	env := &environment{table: table, coordination: coordination, getenv: getenv, stdout: stdout, stderr: stderr}
	switch args[0] {
	case "table":
		if len(args) < 2 {
			fmt.Fprint(stderr, usage)
			return exitError
		}
		switch args[1] {
		case "create":
			return env.tableCreate(ctx, args[2:])
		case "describe":
			return env.tableDescribe(ctx, args[2:])
		}
	case "coordination":
		if len(args) < 2 || args[1] != "migrate" {
			fmt.Fprint(stderr, usage)
			return exitError
		}
		return env.coordinationMigrate(ctx, args[2:])
	case "reconcile":
		return env.reconcile(ctx, args[1:])
	case "flags":
		return env.flagsCmd(ctx, args[1:])
	case "token":
		return env.tokenCmd(ctx, args[1:])
	case "tenant", "branch", "account":
		return env.directoryCmd(ctx, args[0], args[1:])
	case "run":
		return env.run(ctx, args[1:])
	case "report":
		return env.report(ctx, args[1:])
	case "rebucket":
		return env.rebucket(ctx, args[1:])
	case "compact":
		return env.compact(ctx, args[1:])
	case "replay":
		return env.replay(ctx, args[1:])
	case "lag":
		return env.lag(ctx, args[1:])
	case "abandon-batch":
		return env.abandonBatch(ctx, args[1:])
	case "unfence":
		return env.unfence(ctx, args[1:])
	case "parked":
		return env.parked(ctx, args[1:])
	case "bench":
		// The benchmark is a developer's tool of its own (no product binary
		// links it); say where it went.
		fmt.Fprint(stderr, "ledgerctl: bench is its own command: go run ./cmd/ledgerbench (make bench, make bench-quick)\n")
		return exitError
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "ledgerctl: unknown command %q\n\n%s", args[0], usage)
	return exitError
}
