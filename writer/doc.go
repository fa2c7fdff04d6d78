// Package writer is the ledger's HTTP API over the table: it creates,
// reads, lists, changes and deletes transactions, and serves the reports the
// stream consumers maintain. docs/api.md is the API reference.
//
// Every write is a conditional write: creates only where no item is
// (attribute_not_exists), changes and deletes only at the version the client
// names (If-Match, optimistic locking). A mutation with an Idempotency-Key
// commits its idempotency record in the same TransactWriteItems as the
// change, so a retry replays the first answer and never writes twice
// (idempotency.go). Transactions are stored exactly as the stream consumers
// accept them (aggregates.ParseTransaction), with an updatedAt they measure
// lag from. Writes obey the flags singleton, read through a short cache and
// failing closed (flags.go). Requests are authenticated with JWTs whose
// tenant claim must be the path's tenant (auth.go); ids and names are
// validated so that no input can forge a key (aggregates.ValidateID and
// ValidateName).
package writer
