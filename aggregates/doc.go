// Package aggregates is ledger's domain: what a transaction is, which stored
// images are valid transactions, which reports a transaction contributes to,
// and the exact decimal arithmetic of report deltas.
//
// It is pure: no AWS import, no I/O, no clock. Everything the stream consumers,
// the writer and the reconcile oracle compute about money is computed here, so
// that the live path and the oracle cannot disagree on arithmetic.
//
// The central rule: the delta of a change to a transaction item is
// Contribution(new image) − Contribution(old image), where an absent or invalid
// image contributes zero. Summed over every change of an item this telescopes
// to the contribution of its current image, so reports built from deltas equal
// the fold of the current valid transactions whatever the order of changes.
package aggregates
