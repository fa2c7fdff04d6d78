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
// checkpoint, with the poller's batches. Records are not committed per
// batch, and not as delivered: the window's state carries only where its
// records lie (the lowest and highest sequence number delivered), and on the
// window's final invocation, or earlier once Config.BatchRecords records
// came, processor.CommitShardRange reads the shard from its checkpoint
// through the highest record and commits those records in batches. What is
// committed is the stream's own contiguous run of records, whatever the
// mapping delivered twice, out of order or not yet, so a retry, a window
// delivered again or a half-committed batch left by a killed invocation
// always finishes exactly (docs/exactly-once.md, "Tumbling windows"). Cost:
// one update per report item each batch (10,000 records by default)
// touches, and a checkpoint action per 99 of them; GetRecords calls of its
// own, about one per 1,000 records. Latency: up to the window length (at
// most 15 minutes). A failed final commit fails the invocation as a whole;
// the ESM retries it with the same state, and the checkpoint skips what
// landed.
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
// as assumption 8 describes.
//
// # Guarantees
//
// No input makes the handler panic out of Invoke: a panic is recovered and
// fails the batch with an error naming it. A record that cannot be decoded
// is quarantined (or ignored, when its keys are not a transaction's), never
// fails the batch. Only an event that is not a DynamoDB stream event at all
// (not JSON, no Records array) fails the invocation.
package handler
