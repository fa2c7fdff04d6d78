// Package bench is ledger's side-by-side benchmark (issue 6, BENCHMARKS.md).
// It is a developer's tool, not part of the product: no product binary
// imports it, and it lives outside processor/ for that reason.
//
// What it measures, each on seeded, reproducible workloads a–e
// (workload.go) written to a fresh DynamoDB Local:
//
//   - write requests and write units per 1,000 changes of five ways to
//     keep the reports: per-record updates as seed 003 writes them
//     (perrecord.go), the same behind Powertools-style idempotency markers,
//     seed 003's synchronous createWithReport (synchronous.go), and
//     ledger's own consumer as the poller and as the Lambda handler, fed by
//     an event source mapping played in the bench (stream.go). Units are
//     computed by AWS's billing rules for every write (meter.go; expr.go
//     applies each update expression to a copy of the item, so the meter
//     knows its size before and after without reading it back) and
//     cross-checked against DynamoDB Local's ConsumedCapacity;
//   - end-to-end throughput against the raw read-only drain of the same
//     stream, and exactness under 1% duplicate delivery (the reconcile
//     oracle);
//   - lag from write to report commit at a steady rate (lag.go);
//   - CPU-only decoding and folding against plain encoding/json (cpu.go);
//   - the poller binary's peak memory draining a large backlog, and
//     ledgerctl reconcile over it (memory.go);
//   - issue 22's business calendars (calendar.go): the poller's write units
//     on workload b with its transactions stamped (Stamping) with 3, 5 and
//     7 period types side by side, and rebucket's throughput and write
//     units per transaction, its own and those of the consumers' commits
//     of the moves it causes.
//   - issue 23's fleet (fleet.go, Fleet): 8 in-process pollers on the
//     emulation of AWS's stream (internal/streamemu) at 1,000 open shards
//     and several thousand closed ones, a steady write rate over every
//     shard, a poller joining and one leaving, an idle phase: exactness
//     (the reconcile oracle, the emulation's History and EarlyReads),
//     balance, write units per partition key (Meter.KeyRates), coordinator
//     calls per poller, discovery, idle GetRecords, memory and lag. Not
//     part of Run: `ledgerbench fleet` (make bench-fleet) runs it.
//   - issue 24's roll-up cost (rollupcost.go, RollupCost): workload c in
//     three currencies consumed by pollers on 1, 4 and 16 emulated
//     shards, live and as a catch-up backlog, with roll-ups on and off
//     (processor.Config.NoRollups) on the same changes: write units per
//     1,000 changes by item kind (Meter.Classify), the busiest key of each
//     kind, and hole 8's bound in commits a second. Not part of Run:
//     `ledgerbench rollups` (make bench-rollups) runs it.
//
// Run it with the command cmd/ledgerbench:
//
//	make bench         # the full run, over an hour on 2 cores
//	make bench-quick   # every measurement on small workloads (CI smoke)
//
// or from Go with Run(ctx, Full()) or Run(ctx, Quick()); Result.Markdown
// writes the tables BENCHMARKS.md shows.
package bench
