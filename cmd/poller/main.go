// Command poller consumes a ledger table's DynamoDB stream and keeps the
// reports up to date, exactly once. Several pollers can run on one stream:
// they share its shards through leases in the table. See package
// processor/poller for the protocol and docs/exactly-once.md for why the
// reports stay exact.
//
// It needs no configuration beyond LEDGER_TABLE (default "ledger") and the
// standard AWS SDK environment (AWS_REGION, AWS_ENDPOINT_URL, credentials);
// every flag has an environment fallback. `poller --help` lists them.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
