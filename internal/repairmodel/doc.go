// Package repairmodel is an executable model of the exact repair designed in
// docs/exactly-once.md ("Repairing while consumers run": counted changes),
// for reviewers to attack before the design is built. It has no code of
// its own: its test drives an in-memory world (items with change counts,
// one shard per item so that records of different items become readable in
// any order, consumers committing readable prefixes as runs or as batches
// left half-committed, a branch's applied and foreign counts) through
// random interleavings of writes, readability, commits, damage and the
// repair's steps R0–R6, and checks that every repair write lands exactly
// on its target, the sum of the contributions of the applied images. Each
// mutation removes one element of the design and must be caught.
package repairmodel
