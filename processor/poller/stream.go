package poller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Streams is the part of the DynamoDB Streams API the poller calls: the
// three reads every stream reader of this project makes
// (processor.StreamReader). Use a client from NewStreamsClient: it repairs
// DynamoDB Local's untagged empty maps before the SDK decodes them.
type Streams = processor.StreamReader

var _ Streams = (*dynamodbstreams.Client)(nil)

// ErrNoStream is wrapped by ResolveStream's errors when the table cannot be
// consumed: it does not exist, has no stream, or its stream does not carry
// both images.
var ErrNoStream = errors.New("no usable stream")

// ResolveStream returns the ARN of the table's latest stream, checking that
// the poller can consume it: the table exists, its stream is enabled and
// its view type is NEW_AND_OLD_IMAGES (the processor folds new − old). Each
// refusal wraps ErrNoStream and says what to do; other errors (network,
// permissions) are returned wrapped as they are.
func ResolveStream(ctx context.Context, api table.TableAPI, tableName string) (string, error) {
	info, err := table.DescribeTable(ctx, api, tableName)
	var nf *ddbtypes.ResourceNotFoundException
	switch {
	case errors.As(err, &nf):
		return "", fmt.Errorf("table %s does not exist (create it with `ledgerctl table create`): %w", tableName, ErrNoStream)
	case err != nil:
		return "", err
	case !info.StreamEnabled || info.StreamARN == "":
		return "", fmt.Errorf("table %s has no stream; enable one with view type %s: %w", tableName, table.StreamViewType, ErrNoStream)
	case info.StreamViewType != table.StreamViewType:
		return "", fmt.Errorf("table %s has stream view type %s; the poller needs %s (old and new images to fold new − old): %w",
			tableName, info.StreamViewType, table.StreamViewType, ErrNoStream)
	}
	return info.StreamARN, nil
}

// shard is one shard of the stream as DescribeStream lists it.
type shard struct {
	id     string
	parent string // "" for none
	closed bool   // has an ending sequence number: no records will be added
	start  string // starting sequence number, for ordering
	// disputed: shown open by a listing page that lists a child of it. A
	// shard has children only once closed, so the page contradicts itself
	// and its "open" proves no close after the page (a drain's horizon,
	// noteShards). Pages follow creation order, so a child on a later page
	// than its parent's is no contradiction: the parent closed between.
	disputed bool
}

// listing is a listing of the whole stream (DescribeStream's pages, shards
// ordered oldest first) in progress: the pages read so far and where the
// next one starts. A listing paused by throttling goes on from its page at
// the next pass (issue 23: a listing of 7,055 shards by 8 pollers against
// DescribeStream's 10 calls a second).
type listing struct {
	started time.Time // when its first page was asked for
	start   *string   // the next page's ExclusiveStartShardId
	shards  []shard
	seen    map[string]bool
	status  streamtypes.StreamStatus
}

// errListingPaused means a listing was throttled until its time was up:
// the listing keeps its pages and goes on from the next one later.
var errListingPaused = errors.New("listing paused: DescribeStream throttled")

// run reads the listing's remaining pages. A throttled page is asked for
// again after a pause, unless the pause would end after until (when set):
// then run returns errListingPaused, and l goes on from that page at the
// next call. The coordinator's pass holds up every renewal while it lists,
// so a listing waiting out the stream's DescribeStream rate must not run
// past the next renewal: found by the fleet benchmark at 100 and 1,000
// shards, where a pass waiting out up to 200 throttled pages (about 30 s)
// let every lease of the poller expire at once (20 s leases). A page
// after a shard the stream no longer has (ResourceNotFoundException with
// ExclusiveStartShardId set) starts the listing over; a first page's is
// the stream's end, returned as it is. Other errors end the listing: the
// next call starts over.
func (l *listing) run(ctx context.Context, api Streams, budget *describeBudget, streamARN string, until time.Time) (shards []shard, status streamtypes.StreamStatus, err error) {
	if l.seen == nil {
		l.started, l.seen = time.Now(), map[string]bool{}
	}
	throttled, restarted := 0, 0
	for {
		if budget != nil {
			// This poller's share of the fleet's DescribeStream rate
			// (describeBudget): a page whose turn comes after until waits
			// for the next pass, the pages read so far kept.
			if err := budget.wait(ctx, until); err != nil {
				if errors.Is(err, errDescribeDeferred) {
					return nil, "", fmt.Errorf("describe stream %s: %w after %d shards: %w", streamARN, errListingPaused, len(l.shards), err)
				}
				*l = listing{}
				return nil, "", fmt.Errorf("describe stream %s: %w", streamARN, err)
			}
		}
		out, err := api.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(streamARN), ExclusiveStartShardId: l.start})
		if budget != nil {
			budget.answered(err)
		}
		var nf *streamtypes.ResourceNotFoundException
		if errors.As(err, &nf) && l.start != nil && ctx.Err() == nil {
			// A page after a shard the stream no longer has: a listing
			// paused across passes resumes after the last shard of its last
			// page, which may have been trimmed away meanwhile (a closed
			// shard is deleted 24 hours on), and AWS does not say what
			// DescribeStream answers then. Only a first page's
			// ResourceNotFoundException says the stream is gone: this
			// listing starts over (review, session 15: the poller took it
			// for the stream's end and exited).
			if restarted++; restarted > maxListRestarts {
				*l = listing{}
				return nil, "", fmt.Errorf("describe stream %s: the page after a listed shard is refused: %v", streamARN, err)
			}
			*l = listing{started: time.Now(), seen: map[string]bool{}}
			continue
		}
		var le *streamtypes.LimitExceededException
		if errors.As(err, &le) && ctx.Err() == nil {
			// The stream's DescribeStream rate (10 a second, shared by every
			// reader): the same page again after a pause, so that a listing
			// of thousands of shards by several pollers completes instead of
			// starting over at every pass (found by the fleet benchmark at
			// 1,000 shards, where no listing ever completed). Past until or
			// maxListThrottles the listing pauses, keeping its pages: it
			// never starts over for throttling (with 8 pollers sharing 10
			// calls a second, no listing of 71 pages restarted after 200
			// throttles ever completed).
			throttled++
			if throttled > maxListThrottles || (!until.IsZero() && !time.Now().Add(listPauseMax).Before(until)) {
				return nil, "", fmt.Errorf("describe stream %s: %w after %d shards: %w", streamARN, errListingPaused, len(l.shards), err)
			}
			pause(ctx, min(throttled, 5))
			continue
		}
		if err != nil {
			*l = listing{}
			return nil, "", fmt.Errorf("describe stream %s: %w", streamARN, err)
		}
		d := out.StreamDescription
		if d == nil {
			*l = listing{}
			return nil, "", fmt.Errorf("describe stream %s: no stream description", streamARN)
		}
		l.status = d.StreamStatus
		parents := make(map[string]bool, len(d.Shards))
		for _, s := range d.Shards {
			if id := aws.ToString(s.ParentShardId); id != "" {
				parents[id] = true
			}
		}
		for _, s := range d.Shards {
			id := aws.ToString(s.ShardId)
			if id == "" || l.seen[id] {
				continue
			}
			l.seen[id] = true
			sh := shard{id: id, parent: aws.ToString(s.ParentShardId)}
			if r := s.SequenceNumberRange; r != nil {
				sh.closed = r.EndingSequenceNumber != nil
				sh.start = aws.ToString(r.StartingSequenceNumber)
			}
			sh.disputed = !sh.closed && parents[id]
			l.shards = append(l.shards, sh)
		}
		l.start = d.LastEvaluatedShardId
		if l.start == nil || aws.ToString(l.start) == "" {
			break
		}
	}
	shards, status = l.shards, l.status
	*l = listing{}
	sort.SliceStable(shards, func(i, j int) bool {
		if c := processor.CompareSequence(shards[i].start, shards[j].start); c != 0 {
			return c < 0
		}
		return shards[i].id < shards[j].id
	})
	return shards, status, nil
}

// maxListRestarts bounds the times one call of a listing starts over
// because a page's start shard is gone.
const maxListRestarts = 3

// listPauseMax is the longest pause before a throttled page is asked for
// again (pause at attempt 5 and after).
const listPauseMax = 320 * time.Millisecond

// errNoShardFilter means a DescribeStream with a ShardFilter was refused
// as invalid, or answered with shards that are not the children asked
// for: the stream (DynamoDB Local) does not implement the filter.
var errNoShardFilter = errors.New("describe stream: ShardFilter not supported")

// listChildren returns the children of the shard parent with one
// DescribeStream filtered by ShardFilter CHILD_SHARDS. It returns
// errNoShardFilter when the stream ignores or refuses the filter.
func listChildren(ctx context.Context, api Streams, streamARN, parent string) ([]shard, error) {
	out, err := api.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{
		StreamArn:   aws.String(streamARN),
		ShardFilter: &streamtypes.ShardFilter{Type: streamtypes.ShardFilterTypeChildShards, ShardId: aws.String(parent)},
	})
	var ae smithy.APIError
	switch {
	case errors.As(err, &ae) && (ae.ErrorCode() == "ValidationException" || ae.ErrorCode() == "InvalidArgumentException"):
		return nil, fmt.Errorf("%w: %w", errNoShardFilter, err)
	case err != nil:
		return nil, fmt.Errorf("describe stream %s, children of %s: %w", streamARN, parent, err)
	case out.StreamDescription == nil:
		return nil, fmt.Errorf("describe stream %s: no stream description", streamARN)
	case aws.ToString(out.StreamDescription.LastEvaluatedShardId) != "":
		return nil, fmt.Errorf("%w: the answer has more pages", errNoShardFilter)
	}
	var kids []shard
	for _, s := range out.StreamDescription.Shards {
		sh := shard{id: aws.ToString(s.ShardId), parent: aws.ToString(s.ParentShardId)}
		if sh.parent != parent {
			return nil, fmt.Errorf("%w: shard %s's parent is %q, not %s", errNoShardFilter, sh.id, sh.parent, parent)
		}
		if r := s.SequenceNumberRange; r != nil {
			sh.closed = r.EndingSequenceNumber != nil
			sh.start = aws.ToString(r.StartingSequenceNumber)
		}
		kids = append(kids, sh)
	}
	return kids, nil
}

// NewStreamsClient returns a DynamoDB Streams client for cfg whose
// GetRecords answers are repaired by table.FixEmptyMaps (DynamoDB Local's
// untagged empty maps) before the SDK decodes them. optFns are applied
// after the repair is installed.
func NewStreamsClient(cfg aws.Config, optFns ...func(*dynamodbstreams.Options)) *dynamodbstreams.Client {
	return dynamodbstreams.NewFromConfig(cfg, append([]func(*dynamodbstreams.Options){func(o *dynamodbstreams.Options) {
		o.APIOptions = append(o.APIOptions, table.FixEmptyMaps)
	}}, optFns...)...)
}

// maxListThrottles bounds the throttled DescribeStream pages one call of
// a listing waits out before it pauses until the next pass.
const maxListThrottles = 200

// countingStreams counts the poller's DescribeStream calls
// (ledger_stream_describe_stream_total) by kind and outcome.
type countingStreams struct {
	Streams
	m *Metrics
}

func (c *countingStreams) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	out, err := c.Streams.DescribeStream(ctx, in, opts...)
	kind, outcome := DescribeList, DescribeOK
	if in.ShardFilter != nil {
		kind = DescribeChildren
	}
	var le *streamtypes.LimitExceededException
	switch {
	case errors.As(err, &le):
		outcome = DescribeThrottled
	case err != nil:
		outcome = DescribeError
	}
	c.m.Describes.WithLabelValues(kind, outcome).Inc()
	return out, err
}
