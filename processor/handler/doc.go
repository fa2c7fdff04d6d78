// Package handler is the Lambda side of ledger's stream consumer: the
// handler an event source mapping (ESM) on the table's stream invokes. It
// decodes the raw event (DecodeEvent: one pass, images decoded once by the
// SDK's attribute value decoder), hands the records to the same
// processor.Process the poller and fixture replay use, answers the ESM so
// that it resumes exactly after what was committed, and writes the
// processor's metrics as one CloudWatch Embedded Metric Format line per
// invocation (EMF). cmd/lambda is its thin main; docs/lambda.md is the
// operator's guide.
//
// # Two modes
//
// Standard (events.DynamoDBEvent → events.DynamoDBEventResponse). Every
// batch is committed when it arrives, guarded by run markers
// (processor.MarkerGuard: an item keyed by each run's first record, put if
// absent in the run's transaction). A partial commit is answered with one
// batch item failure, the sequence number of the first record not
// committed; a batch of which nothing could be committed fails as a whole.
// Cost: one marker write per run (a run is at most one batch), plus one
// update per report item the run touches. Latency: one batch.
//
// Tumbling (events.DynamoDBTimeWindowEvent →
// events.DynamoDBTimeWindowEventResponse, ESM with TumblingWindowInSeconds).
// The event carries the shard id, so the commit is guarded by the shard's
// checkpoint (processor.ShardGuard), exactly as the poller's. Records are
// not committed per batch: they are carried in the window's state (compact
// JSON, deflated, base64) from one invocation of the window to the next and
// committed on the window's final invocation, or earlier, when the state
// would exceed Config.StateLimit (700 KB by default; the ESM's limit is
// 1 MB). Committing early is safe: the checkpoint drops every record at or
// below it, so a window whose records were partly committed, or a window
// delivered again, commits only the rest. Cost: one checkpoint update per
// window (or per early commit) and one update per report item the whole
// window touches, so a busy report item is written once per window instead
// of once per batch. Latency: up to the window length (at most 15 minutes).
// A failed commit fails the invocation as a whole; the ESM retries it with
// the same state, and the checkpoint skips what landed.
//
// When to use which: Standard for low latency and low or spiky traffic
// (reports current within a batch), Tumbling when many writes hit few
// report items (one branch's DAILY/MONTHLY/YEARLY reports) and write cost
// matters more than a minute of lag. Both keep the invariant of
// docs/exactly-once.md under the ESM settings it lists (assumption 4:
// BisectBatchOnFunctionError false, ParallelizationFactor 1,
// ReportBatchItemFailures on, MaximumRetryAttempts and
// MaximumRecordAgeInSeconds -1). The two modes keep separate guards (run
// markers, shard checkpoints): switch between them, or to the poller, only
// as assumption 7 describes.
//
// # Guarantees
//
// No input makes the handler panic out of Invoke: a panic is recovered and
// fails the batch with an error naming it. A record that cannot be decoded
// is quarantined (or ignored, when its keys are not a transaction's), never
// fails the batch. Only an event that is not a DynamoDB stream event at all
// (not JSON, no Records array) fails the invocation.
package handler
