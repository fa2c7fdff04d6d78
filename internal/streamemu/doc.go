// Package streamemu emulates an AWS DynamoDB stream in front of DynamoDB
// Local's, for tests and the benchmark: test infrastructure beside the
// fault transport (internal/ledgertest) and the transaction-conflict
// emulation (internal/ddbconflict). No product code imports it.
//
// DynamoDB Local gives a table's stream one shard that never closes,
// never splits and is never trimmed. On AWS a stream has a shard per
// table partition, shards close and are replaced every few hours, split
// when partitions split, age out after 24 hours, and the Streams API has
// limits a consumer must live with. A Stream reads DynamoDB Local's stream
// (Upstream, a client from poller.NewStreamsClient) and serves the same
// records as AWS would, through the three calls every consumer of this
// project makes: DescribeStream, GetShardIterator and GetRecords, with the
// SDK's own input, output and error types. It satisfies
// processor.StreamReader (= poller.Streams), so the real poller, the
// tumbling-window commit (processor.CommitShardRange) and the benchmark's
// event source mapping (bench.ESM's Streams) read it unchanged. Handler
// serves it over HTTP as the DynamoDB Streams API (the awsJson1_0 protocol,
// errors as AWS writes them), so that a consumer in another process reads
// it through its ordinary SDK client: the lambda binary under cmd/lambda's
// tests, with AWS_ENDPOINT_URL_DYNAMODB_STREAMS pointing at it.
//
// # What it models, and where AWS says so
//
//   - Shards by partition key. The records are dealt to the open shards by
//     a hash of their partition key (Config.PartitionKey), each shard
//     taking a range of the hash space, so all records of one item are in
//     one shard of each generation, in order (AWS: "each stream record
//     appears exactly once in the stream ... in the same sequence as the
//     actual modifications to the item", and a stream has a shard per
//     partition; Developer Guide, "Change data capture for DynamoDB
//     Streams", docs.aws.amazon.com/amazondynamodb/latest/developerguide/Streams.html).
//   - Shards close and roll or split. An open shard closes after
//     Config.RollAfter on the stream's Clock (AWS: shards are ephemeral,
//     "created and deleted automatically"; observed every ~4 hours) or
//     after Config.RollRecords records (a schedule a test can count on),
//     or when a test calls Close. It then has one child with its hash
//     range (a roll) or, for a share Config.SplitRatio of closes, two
//     children halving it (a split: "a parent shard might have just one
//     child shard", Streams.html, "Reading and processing a stream").
//     Partitions never merge, so neither do shards.
//   - Lineage. DescribeStream gives each shard its ParentShardId and its
//     SequenceNumberRange (an EndingSequenceNumber once closed: "If both
//     StartingSequenceNumber and EndingSequenceNumber are present, then
//     that shard is closed", API_streams_DescribeStream). A closed shard
//     read to its end answers no NextShardIterator ("If NextShardIterator
//     is null, the shard has been closed", API_streams_GetRecords).
//     Reading parents first is the consumer's job ("process a parent shard
//     before you process a child shard", Streams.html); the emulation does
//     not enforce it but records it: EarlyReads lists every read of a
//     child's records while its parent was in the stream and nobody had
//     been handed its end, and History returns every record in the order
//     DynamoDB Local applied the writes (with its emulated shard and
//     sequence number), from which a test tells whether a child's
//     checkpoint moved before its parent's was marked finished.
//   - DescribeStream pages: at most Limit shards (≤ 100, default 100:
//     API_streams_DescribeStream "The upper limit is 100"; Config.ListPage
//     pages a small stream as a large one), in creation order (shard ids
//     sort by creation time), LastEvaluatedShardId set while more follow,
//     ExclusiveStartShardId to go on. A ShardFilter of type CHILD_SHARDS
//     returns only the children of its ShardId (API_streams_ShardFilter:
//     "the shardId of the parent shard for which you are requesting child
//     shards"; the only type there is).
//   - Sequence numbers are digit strings (21 digits here), increasing
//     within a shard and from a parent to its children; a shard's
//     StartingSequenceNumber is below its first record's, and
//     AT_SEQUENCE_NUMBER at it reads from the first record.
//   - Retention: a record older than Config.Retention (24 hours: "All data
//     in DynamoDB Streams is subject to a 24-hour lifetime", Streams.html)
//     is trimmed. TRIM_HORIZON moves past it; an iterator at it, or a
//     sequence number at or before it, answers TrimmedDataAccessException
//     (both cases of API_streams_GetRecords' and GetShardIterator's
//     TrimmedDataAccessException). A closed shard is deleted once its close
//     is older than the retention: ResourceNotFoundException, and its
//     children are listed with a parent that no longer is.
//   - Iterators expire Config.IteratorTTL (15 minutes) after they were
//     issued, GetShardIterator's and each NextShardIterator alike:
//     ExpiredIteratorException ("A shard iterator expires 15 minutes after
//     it is returned to the requester", API_streams_GetShardIterator).
//   - Limits (Config.Limits; AWSLimits holds AWS's values; the zero value
//     enforces none), answered with LimitExceededException, as AWS's
//     DynamoDB Streams answers a rate exceeded ("Your request rate is too
//     high", the GetRecords and DescribeStream errors): DescribeStream at
//     most 10 calls a second ("You can call DescribeStream at a maximum
//     rate of 10 times per second", API_streams_DescribeStream);
//     GetRecords 5 a second per shard (an assumption: the figure the
//     poller paces itself by, Config.MinReadInterval 200ms, and Kinesis
//     Data Streams' documented per-shard GetRecords limit; the DynamoDB
//     Streams pages found give no per-shard rate besides the reader rule);
//     and at most 2 readers of a shard at once ("Do not allow more than two
//     processes to read from the same DynamoDB Streams shard at the same
//     time. Exceeding this limit can result in request throttling",
//     developerguide/ServiceQuotas.html#limits-dynamodb-streams). A
//     reader is an iterator chain (GetShardIterator's iterator and the
//     NextShardIterators after it) heard from within Limits.ReaderIdle.
//     GetRecords' Limit is 1..1000 ("The upper limit is 1000"), beyond it
//     a ValidationException.
//   - Time is Config.Clock's: Compressed runs a day in a minute, Manual
//     moves when a test says. Shard lives, record ages and iterator ages
//     are on it; call rates are on the wall clock (a consumer's pacing is
//     real time whatever the stream's).
//
// # Scale
//
// A call costs the same on a stream of 1,000 open shards and several
// thousand closed ones as on a stream of four (issue 23; BenchmarkStream
// measures it at 100 and 1,000 shards): shards are found by id in a map,
// a record's shard by binary search of the open shards' hash ranges, a
// sequence number by binary search of its shard's records, a
// DescribeStream page by binary search of the shards in id order; the
// schedule's closes come off a heap, the retention's trims and deletions
// off queues in time order (index.go). Memory holds the records within
// the retention and the shards still listed, plus the lineage (Parents:
// two ids per shard ever made) and History, which keeps every record for
// the whole run unless Config.HistoryFilter chooses fewer (the fleet
// benchmark keeps the coordination items' records: checkpoints and leases).
//
// # Deviations
//
//   - The emulated shards hold DynamoDB Local's records: their
//     ApproximateCreationDateTime is DynamoDB Local's (rounded to the
//     minute), not the emulated Clock's, and the emulated sequence
//     numbers replace DynamoDB Local's.
//   - Records reach the emulation when it reads the upstream stream: at
//     most every Config.PullInterval (10ms) of wall time, inside the calls
//     (Sync reads at once). Their age for the retention counts from then.
//   - Hash ranges are the emulation's own: AWS does not show a DynamoDB
//     stream's shard hash ranges, nor when partitions split; a schedule of
//     time or record counts stands in for both, independent of load. The
//     hash is FNV-1a of the partition key, finished with MurmurHash3's
//     64-bit mixer so that keys differing only at their end (a tenant's
//     roll-up lanes) spread over the shards as DynamoDB spreads partition
//     keys, instead of falling in one.
//   - A shard's children exist from the moment it closes (AWS may list a
//     child a little later), and a closed shard's last GetRecords returns
//     its last records with no next iterator (AWS may first answer empty
//     pages). GetRecords never answers an empty page inside a shard, and
//     no 1 MB page bound applies.
//   - The reader limit counts iterator chains, the closest thing to a
//     process the API shows: a consumer that reopens its iterator starts a
//     new chain, and the old one counts until ReaderIdle has passed.
//   - ListStreams answers only the emulated stream (its table's, once the
//     upstream was read), unpaged; DescribeStream's StreamStatus is
//     DynamoDB Local's (ENABLED).
//   - The HTTP front end (Handler) accepts any request signature, and
//     answers a body it cannot read with a SerializationException and an
//     unknown X-Amz-Target with an UnknownOperationException (HTTP 400).
package streamemu
