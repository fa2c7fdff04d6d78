// Package table is the one home of the ledger's single DynamoDB table: its
// definition and everything the writer, the stream consumers and ledgerctl
// share about its items. Each shared item type has one file holding its
// attribute names, its codec and the condition expressions of every write
// that changes it:
//
//   - table.go: keys, indexes, stream, TTL; CreateTable, DescribeTable,
//     TableInfo.Validate;
//   - transaction.go: the transaction item (EncodeTransaction,
//     DecodeTransaction, ParseTransaction);
//   - report.go, reportupdate.go: the report item, its entry items and
//     parked deltas; the consumers' additive updates and the repair's
//     writes;
//   - flags.go: the settings singleton (GetFlags, SetFlags);
//   - checkpoint.go: the shard checkpoint, the state exactly-once rests on —
//     its claims inside commits, its moves outside them, and the listing of
//     a stream's checkpoints and leases (ReadStreamState);
//   - lease.go, marker.go, quarantine.go: leases, run markers, quarantined
//     records.
//
// Besides: attr.go holds the attribute-value helpers every codec uses
// (S, Int, Key, String, Image, …), itemsize.go the billing rule for writes,
// and quirks.go the fixes for DynamoDB Local's differences from AWS.
//
// Key formats are domain knowledge and stay in aggregates (keys.go); this
// package turns them into items. The items only the writer uses (tenants,
// branches, accounts, emails, idempotency) are the writer's. docs/design.md
// lists every item type with its keys, writers, readers and home.
package table
