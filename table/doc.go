// Package table is the one home of the ledger's single DynamoDB table: its
// definition (table.go: keys, indexes, stream, TTL; CreateTable,
// DescribeTable), the stored layout of every item the writer, the stream
// consumers and ledgerctl share — each item type's attribute names, codec
// and condition expressions in its own file — the attribute-value helpers
// they all use, the billing rule for writes (itemsize.go), and the fixes for
// DynamoDB Local's quirks (quirks.go).
//
// Key formats are domain knowledge and stay in aggregates (keys.go); this
// package turns them into items. docs/design.md lists every item type with
// its keys, attributes, writers and readers, and names the file here that
// owns it.
package table
