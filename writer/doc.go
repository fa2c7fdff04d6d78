// Package writer is the ledger's HTTP API over the table: it keeps the
// directory (tenants, branches, accounts and their email addresses),
// creates, reads, lists, changes and deletes transactions, and serves the
// reports the stream consumers maintain. docs/api.md is the API reference.
//
// Every write is a conditional write: creates only where no item is
// (attribute_not_exists), changes and deletes only at the version the client
// names (If-Match, optimistic locking). A mutation with an Idempotency-Key
// commits its idempotency record in the same TransactWriteItems as the
// change, so a retry replays the first answer and never writes twice
// (idempotency.go). The directory's integrity rules — unique email
// addresses and document numbers, one verified primary address per
// account, transactions only for active tenants and branches, no deletion
// of a branch that has had transactions — are conditions in the same
// TransactWriteItems as the change they guard (directory.go, store_*.go),
// each action of a change carrying what its failed condition means
// (change.go).
// Transactions are stored exactly as the stream consumers accept them
// (aggregates.ParseTransaction), with an updatedAt they measure lag from.
// Every version of a transaction is kept in its audit trail, a history
// entry written in the same TransactWriteItems as the version, naming the
// token's subject, the receive time and the request id, readable after a
// delete (store_history.go).
// Writes obey the flags singleton, read through a short cache and failing
// closed (flags.go). Requests are authenticated with JWTs whose tenant
// claim must be the path's tenant, or whose scope is admin (auth.go); ids
// and names are validated so that no input can forge a key
// (aggregates.ValidateID, ValidateName, ValidateEmail, ValidateDocument).
package writer
