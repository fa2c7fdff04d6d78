// Package poller is the long-running stream consumer: it reads a ledger
// table's DynamoDB stream with the Streams API (DescribeStream,
// GetShardIterator, GetRecords) and hands its records to the processor in
// batches of pages, whose commits are exact under redelivery
// (docs/exactly-once.md). Several pollers can run on one stream; they share
// its shards through leases kept in the coordination table
// (table/coordination.go), which has no stream.
//
// # Shards
//
// The coordinator lists the shards (DescribeStream, paginated) at start and
// every Config.DiscoverInterval. A shard is read only once every parent it
// has is finished (read to its end) or no longer listed (trimmed away), so
// a key's records are applied parents first. A closed shard read to its
// end (GetRecords returns no next iterator) gets shardFinished set on its
// checkpoint, and its children become readable: the next pass looks them
// up with one DescribeStream filtered to them (ShardFilter CHILD_SHARDS)
// rather than a listing of the whole stream, which at AWS's scale is
// thousands of shards at every shard's end (a stream that ignores or
// refuses the filter is listed whole instead), unless the last listing
// showed the shard closed with its children. The poller that looked them
// up registers each child in a free lease item with its parent and first
// sequence number (table.RegisterShard), and every poller adds the shards
// lease items describe to its list as its sweep of the leases reads them:
// between two listings of the whole stream the others learn of new shards
// from the leases they read anyway. A shard found without children (by the
// filter, or by a listing that ended first) is looked up again at each pass
// for two minutes: AWS may list a closed shard's children a moment after it
// closes. A listing paused by throttling goes on from its page at the
// next pass; one whose next page the stream refuses as not found (the
// shard it starts after was trimmed away meanwhile) starts over, since
// only a first page's ResourceNotFoundException means the stream is gone.
// A child of a shard this
// stream's consumers have read, without a checkpoint of its own, opens at
// its starting sequence number (AT_SEQUENCE_NUMBER; TRIM_HORIZON if that is
// refused), so that records trimmed from its start are counted as lost
// (below), not skipped unnoticed.
//
// # Checkpoints
//
// A shard's checkpoint is processor.ShardGuard's item (aggregates.CheckpointKey),
// moved by the compare-and-set inside every commit transaction; its layout
// and every write that changes it are table/checkpoint.go's. A reader
// opens its iterator AFTER_SEQUENCE_NUMBER the checkpoint and declares it
// with ShardGuard.SetOrigin, or at TRIM_HORIZON (default) or LATEST
// (Config.StartPosition) when there is none. Records with no effect (the
// consumers' own report writes, non-transaction items; an invalid
// transaction record commits its quarantine item with the batch) commit
// nothing, so the reader itself moves the checkpoint over them, at
// most every Config.CheckpointInterval, at a shard's end and before it stops,
// with a conditional UpdateItem that has the guard's semantics (from the
// value the reader's guard holds to the last record it processed); a
// reader whose checkpoint someone else moved changes nothing. It then
// continues with a new guard whose origin is the new checkpoint. This keeps
// restarts from rereading hours of report writes, and keeps an idle shard's
// checkpoint inside the stream's 24-hour retention.
//
// An expired iterator (ExpiredIteratorException, 15 minutes after it was
// issued) is reopened after the checkpoint once it has been moved up to the
// last record processed. Records older than the retention are gone
// (TrimmedDataAccessException): the reader counts it
// (ledger_stream_iterator_resets_total{reason="trimmed"}), logs an error and
// reopens at TRIM_HORIZON; records at or before the checkpoint are still
// skipped. The trimmed records are lost to every consumer, not only to this
// one; `ledgerctl reconcile --repair` restores the reports from the
// transactions (assumption 2 of docs/exactly-once.md).
//
// A shard is given up as gone (closed and aged out of the retention) only
// when DescribeStream confirms a ResourceNotFoundException of
// GetShardIterator or GetRecords (processor.ShardGone: the stream no
// longer exists, or lists no such shard). One it contradicts or cannot
// confirm is a failed read, retried with backoff like any other. A shard
// marked gone that a later listing has again is read again: no answer
// keeps a shard from this poller for the life of the process.
//
// # Leases
//
// A lease is an item per shard (aggregates.LeaseKey) with leaseOwner,
// leaseCounter, leaseExpiry (informational) and pendingOwner. Every change
// but a request increments the counter, and every write is conditional on
// the counter last seen:
//
//   - take: a free lease (no item, or no owner), an expired one, or one that
//     names this owner (its previous life): SET owner = me, counter + 1;
//     condition counter = seen (or no counter yet);
//   - renew, every LeaseDuration/3: counter + 1; condition owner = me and
//     counter = mine. A renewal that fails for a retryable reason or with an
//     unknown outcome is retried while the lease is valid (at most half a
//     renewal interval per round). A failed condition is followed by a
//     consistent re-read: owner = me at the counter the renewal wrote is
//     this poller's own write whose answer was lost (as KCL does), and the
//     lease is kept, valid from the first attempt that could have written
//     it; anything else means another poller has the lease: the reader is
//     cancelled at once. Takes, releases, hand-offs, requests and
//     checkpoint moves recognise their own lost answers the same way
//     (docs/exactly-once.md, "Leases");
//   - expiry: a poller considers a lease expired once it has seen the same
//     counter for LeaseDuration on its own clock (as KCL does: no clock is
//     compared across machines). The owner stops its reader at the send
//     time of its last successful renewal + LeaseDuration, before any other
//     poller can have seen that renewal's counter for LeaseDuration;
//   - release (shutdown, shard finished, drain done): counter + 1, owner
//     removed; condition owner = me and counter = mine. Leases are released
//     only after the reader's last commit and checkpoint move;
//   - hand-off: the owner writes owner = the new owner, counter + 1
//     (condition owner = me and counter = mine) after the batch in hand is
//     committed, and names the shard in the new owner's worker item
//     (offers); the new owner takes it at once, its offer watch reading
//     its worker item every Config.OfferWatch (1 s), or at its next round
//     without the watch. A drain asks
//     for leases instead (pendingOwner, condition: owner and counter as
//     seen, no pending yet); the owner sees the ask in its next renewal's
//     answer. A dead receiver only delays the shard by one lease expiry.
//
// # The worker heartbeat (session 16)
//
// A live poller does not renew its leases one by one: a lease is live while
// its owner's heartbeat moves (docs/exactly-once.md, "The worker
// heartbeat"). Each round it writes its worker item (beat + 1, leaseMode =
// heartbeat at modeBeat = that beat, condition: no fencedBeat, and after
// the first the item exists), and every lease it holds is valid
// until that write's send time + LeaseDuration. A lease item is written
// only when it changes hands. Another poller takes a heartbeat owner's
// lease over once it read the owner's beat unchanged at two registry reads
// LeaseDuration apart (or read it left), and only after its fence of the
// owner's worker item (fencedBeat = the beat seen, condition beat = the
// beat seen), written in the same batch of takes after the lease was read,
// landed: a later heartbeat of the owner then fails, so its
// validity cannot grow after the fence, and it had already ended. An owner
// whose heartbeat is refused by a fence drops every lease and registers
// again (ledger_poller_lease_events_total{event="rejoined"}). A poller
// renews every lease too while the registry shows a live poller that does
// not heartbeat (an older version, or Config.LeaseMode renew), whose
// take-over rule is the lease counter's; a drain always does, and tells a
// heartbeat owner of its requests in the owner's worker item (asks).
//
// # The incarnation (incarnation.go, session 19)
//
// Each process draws a random incarnation. Its first worker write claims
// the item (sets it); every later one is conditional on it, and every lease
// it takes carries it (leaseIncarnation; a release removes it). A refused
// worker write is re-read: another incarnation means another live process
// was given the same Owner and claimed the item since, so this one drops
// every lease and Run returns an *OwnerInUseError; a fence or a deleted
// item means the rejoin, as before. The newer process takes the older
// one's leases only once they stood unchanged for a lease duration after
// its claim was answered, and recognises a lost answer only by its own
// incarnation (docs/exactly-once.md, review of the heartbeat, HB6).
//
// # Share-bounded rounds (share.go)
//
// A live poller's round reads what its share needs, not the stream's
// coordination state (issue 23). It writes its worker registry item
// (aggregates.WorkerKey: a heartbeat and the leases it holds) and reads the
// stream's few worker items: the live pollers (a heartbeat seen to change
// within LeaseDuration on this poller's clock) and what each holds. For
// the share and the DescribeStream rate, an item whose beat this poller
// has not seen change counts only for half a lease duration after its
// first read (a crashed poller's item stops counting then), and it is
// offered or handed nothing (docs/exactly-once.md, S17-D3). Its own
// leases' state comes from its renewals' answers. The lease partition is
// swept a page of Config.LeaseScanPage items per round, from where the
// last page ended (whole at start): free and expired leases, finished
// shards (a finished shard's release marks its lease shardFinished) and
// shards registered by the others. Checkpoints are read only for a
// decision: before a take, the shard's own (a finished shard is not
// taken) and its parent's, when neither this poller nor the parent's
// lease says the parent is finished and no live poller holds the parent.
// A reader's end does its shard's work only: finish, look up and register
// the children, take them while under the share, offer the rest to the
// poller furthest under its share.
//
// Fair share: ceil and floor of the leasable shards (the eligible shards
// this poller knows of, or the leases the live pollers hold if more) over
// the live pollers. A poller takes free and expired leases up to the
// ceiling. Balance is a plan every poller computes the same from the
// registry: one lease at a time from the poller holding the most to the
// one holding the fewest, while the first is over the ceiling, or (when
// no lease is free) the second under the floor, and they are two or more
// apart; each poller makes the hand-overs that start from it. So three
// pollers on four shards hold two, one and one, and a joining poller is
// handed its share by those over it at their next round. A poller leaving
// hands every lease over to the live pollers under their share. A poller
// takes nothing before its second read of the registry (one round after
// it registered, before it listed the stream), so that pollers starting
// together see each other before they take: the first does not take
// everything. A drain run reads every lease and checkpoint at each pass,
// takes every lease it can and asks every live owner for theirs.
//
// The plan counts another poller as its item's held, plus its offers,
// plus this poller's own hand-overs to it that the last registry read
// could not show (heldBy, inFlight: leases whose readers are still
// committing, offers answered after the read was sent, offers whose write
// failed). No lease handed over is in nobody's count (docs/exactly-once.md,
// "The givers' overshoot (session 23)"): the giver counts it in its held
// until its offer write is answered, and the receiver's item shows it in
// its offers from then until the heartbeat whose held counts the take
// removes it in the same write (table.OffersCounted); an offer whose take
// the pacer deferred, or whose outcome is unknown (no answer, no re-read),
// stays offered (review of session 23, S23-C1). Before, a receiver
// cleared an offer at its take, and the others' hand-overs were visible to
// nobody until its next heartbeat while the givers' counts had already
// dropped: each giver whose round came in that gap saw the receiver under
// the floor and handed it more (a joiner at 171 against a share of 138 in
// the fleet benchmark). Now no plan sees a receiver lower than what it
// holds and was offered; hand-overs still in a giver's hands are counted at
// that giver, from which the plan moves first, so a later plan does not
// make them again. Not excluded: where two plans' parts for one giver
// differ (ties broken by name over counts that changed in between), at
// most the hand-overs it had in transit, once each. Counted twice (a
// giver's held until its next heartbeat beside the receiver's offers), a
// lease only delays a move by a round.
//
// # At most two readers per shard
//
// Correctness does not depend on leases: every commit and every checkpoint
// move is a compare-and-set on the shard's checkpoint, so a reader that
// lost its lease (or never had it) can only fail its condition, re-read the
// checkpoint, and skip what was committed. Leases keep the work from being
// done twice. A shard has at most two readers at any instant: the lease
// owner, and a previous owner whose lease expired or was taken while a call
// was in flight. The previous owner cancels its reader when a renewal
// fails or its validity ends, which happens before anyone else may take the
// lease over, so only a request already on the wire can land afterwards;
// and that request is harmless for the reason above.
//
// # Reading and call rates
//
// Each reader reads its shard in order, one GetRecords of up to
// Config.MaxRecords (1,000) records at a time, and gathers the pages into
// one batch of at most Config.BatchRecords (10,000) records: full pages
// while the shard is behind, any pages for up to Config.BatchWindow (1 s)
// once it is caught up. It processes the batch (decode, fold, commit)
// before it reads on. The records held are not checkpointed: a stop
// (shutdown, hand-off) commits them first, and a reader that dies holding
// them leaves them to be read again.
//
// Memory is bounded for the whole poller, not per shard: every record in
// memory comes out of one budget, Config.MaxHeldRecords (20,000). A
// reader takes its next page's Limit from it before the GetRecords call,
// gives back what the page did not use at once, and the batch after its
// commit. A reader holding nothing waits for budget in turn (first come,
// first served: no shard starves) and accepts part of its limit, at least
// the budget divided by the readers running, reading a smaller page; a
// reader gathering a batch takes more only while no one waits, and
// otherwise commits the batch it holds early, so the budget always comes
// back. Exactness does not depend on it (it only limits reads); the
// batching window and batch commits work as before, with batches that
// are smaller while the budget is short. One exception: a shard finishing
// a batch that a previous reader half committed (ErrIncompleteBatch)
// reads past the budget, since it cannot commit part of that batch.
// ledger_poller_held_records_budget_used shows the budget in use. A second
// budget, Config.MaxHeldBytes (32 MiB), bounds the same records by their
// wire size: each read takes 1 MiB (AWS's most per GetRecords response)
// before the call, after its records, and keeps what the page held
// (SizeBytes), so that large records (a tenant's report items make records
// of up to 80 KB) cannot fill gigabytes within the records budget.
//
// Calls on one shard are at
// least Config.MinReadInterval (200 ms) apart: at most 5 GetRecords per
// second per shard, DynamoDB Streams' documented limit, per reader (and at
// most two readers, above). After an empty page the reader waits
// MinReadInterval, doubling up to Config.IdleBackoff (1 s, the fast
// interval), and while its pages stay empty on up to
// Config.MaxIdleBackoff (10 s), each wait past IdleBackoff drawn in 3/4 to
// 1 of its step; the first page with records brings it back to
// MinReadInterval. An idle shard costs about 3,600 / (0.875 ×
// MaxIdleBackoff) GetRecords an hour (411 at 10 s; 3,600 at 1 s before
// issue 23), and the first write after a quiet period waits up to
// MaxIdleBackoff longer to be read: that is the trade, set by
// --max-idle-backoff (docs/design.md, "The poller's reads at scale"). A
// drain and the reader of a closed shard do not grow past IdleBackoff:
// they wait for an end, not for writes, and a drain must not take longer.
// An open shard that closes while its reader is backed off is seen at
// its end up to MaxIdleBackoff later. Throttled or failed calls back off
// exponentially from ThrottleBackoff (200 ms) to MaxThrottleBackoff (5 s)
// with full jitter, on top of the SDK's own retries; after MaxReadFailures
// in a row the reader gives the shard up until the next coordinator pass.
// DescribeStream is called every DiscoverInterval (5 min: the whole
// stream), and once per shard end for its children (CHILD_SHARDS), which
// costs one conditional write per child (its registration); all of them
// paced so that the fleet's DescribeStream calls stay under
// Config.DescribeRate a second together (each poller that rate over the
// live pollers of the worker registry, halved per throttled answer: AWS
// allows 10 a second per stream, for all its readers); per
// LeaseDuration/3 a live poller writes its worker item, Queries the worker
// registry and one page of the lease sweep, and reads the checkpoints its
// takes need (a drain Queries the lease partition and the 16 checkpoint
// partitions at every pass); each held lease costs one UpdateItem per
// LeaseDuration/3 (in LeaseModeRenew, compat and a drain). The writes to
// the lease and worker partitions that keep no lease valid (takes,
// releases, registrations, requests, offers, asks and their clears, a
// gone poller's fence, the leave) are paced so that the fleet's stay under
// Config.CoordinationWriteRate write units a second per partition (each
// poller that rate over the live pollers of the worker registry; a write
// whose turn comes after its round's deadline waits for the next round);
// heartbeats and renewals never wait (writePacer).
//
// # Drain and shutdown
//
// With Config.Drain, Run returns once every record readable in the stream
// when it started is committed (docs/exactly-once.md, "The drain's
// promise"), nil; or, when some of them were trimmed before the run reached
// them or were in a shard gone from the stream unfinished, once every other
// one is, a *DrainLossError (ErrDrainLost) naming the shards and positions
// (`poller --drain` exits 4). Its work is done when every listed shard is finished, gone, or left by the run —
// read by it up to an empty page (its end then) with everything committed,
// or made after its start (a descendant of a shard a DescribeStream
// answer of the run showed open) —, the children of every shard finished
// are known, and the shard list was read again after the last reader
// stopped. A shard an answer of the run showed open and the run read to
// an empty page is not read again when it closes later: its tail holds
// only records not readable at that page, its children only records
// written after its close (before issue 23 it was never read again and
// its children were waited for forever; session 22 read it and its
// children, and the drain exited only once a listing showed no such
// close, which a listing longer than the gap between two closes never
// did). A closed shard's reader reads on past empty pages to its end.
// When Run's context ends, readers stop after the batch in hand,
// commit it, move their checkpoints, and the leases are released; after
// Config.ShutdownTimeout the batches still in hand are abandoned (they are
// redelivered to the next owner, harmlessly). Before the releases, a live
// poller looks up, registers and offers to the live pollers the children
// of the shards it finished and had not yet offered (stopKids), so that
// a stop at a shard's end does not leave them to the next listing.
//
// # DynamoDB Local
//
// Use a Streams client from NewStreamsClient: DynamoDB Local writes empty
// map attributes in stream images as an untagged {} that the SDK decodes
// into the wrong value; FixEmptyMaps rewrites them to {"M":{}} before the
// SDK sees them. DynamoDB Local's stream has one shard that never closes;
// the tests run the poller on an emulation of AWS's stream in front of it
// as well (internal/streamemu: shards that roll, split and are trimmed,
// iterators that expire, AWS's call limits).
package poller
