package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

const lagHelp = `Says how far the stream's consumer is behind, shard by shard, right now.

For each shard of the table's stream it reads the consumer's checkpoint
(the item STREAM#{stream ARN} / SHARD#{shard id} that the poller and the
tumbling-window Lambda move inside each commit) and the lease owner, then
reads the shard from just after the checkpoint to its current end (at most
--max-records records) and prints:

  pending        records after the checkpoint (the consumers' own report,
                 checkpoint and marker writes included: a caught-up shard
                 always shows a few of those);
  pending txns   the pending records of transaction items: changes the
                 reports do not show yet;
  oldest txn     the age (now − ApproximateCreationDateTime) of the oldest
                 pending transaction record: the iterator age a consumer at
                 the checkpoint has now, and how stale the reports are at
                 most. DynamoDB Local rounds that time down to the minute.

A shard without a checkpoint counts from its trim horizon. The standard-mode
Lambda keeps no checkpoints (its guard is run markers): for it, watch the
IteratorAge metric of the function instead.
Exit status: 0, or 1 when --max-age is given and a pending transaction record
is older than it, 2 error.`

// streams returns a DynamoDB Streams client for the environment.
func (e *environment) streams(ctx context.Context) (*dynamodbstreams.Client, error) {
	var opts []func(*config.LoadOptions) error
	if ep := e.getenv("AWS_ENDPOINT_URL"); ep != "" {
		opts = append(opts, config.WithBaseEndpoint(ep))
	}
	cfg, err := infra.LoadConfig(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return poller.NewStreamsClient(cfg), nil
}

// shardLag is one row of 'ledgerctl lag'.
type shardLag struct {
	Shard    string `json:"shard"`
	Parent   string `json:"parent,omitempty"`
	Closed   bool   `json:"closed"`
	Finished bool   `json:"finished"`
	// Fenced: the checkpoint is a copy `coordination migrate` has not
	// released yet; no consumer commits on the shard until it is.
	Fenced       bool       `json:"fenced,omitempty"`
	Owner        string     `json:"owner,omitempty"`
	Checkpoint   string     `json:"checkpoint,omitempty"`
	LastCommit   string     `json:"lastCommit,omitempty"`
	Pending      int        `json:"pending"`
	PendingTxns  int        `json:"pendingTransactions"`
	Truncated    bool       `json:"truncated,omitempty"` // stopped at --max-records
	OldestTxn    *time.Time `json:"oldestPendingTransaction,omitempty"`
	OldestTxnAge float64    `json:"oldestPendingTransactionAgeSeconds"`
}

// streamOf returns the DynamoDB client and the stream: arn when set (a
// --stream-arn flag), else the table's latest stream.
func (e *environment) streamOf(ctx context.Context, arn string) (*dynamodb.Client, string, error) {
	c, err := e.dynamo(ctx)
	if err != nil {
		return nil, "", err
	}
	if arn == "" {
		if arn, err = poller.ResolveStream(ctx, c, e.table); err != nil {
			return nil, "", err
		}
	}
	return c, arn, nil
}

func (e *environment) lag(ctx context.Context, args []string) int {
	fs := e.flags("lag", lagHelp)
	streamARN := fs.String("stream-arn", "", "the stream `ARN` (default: the table's latest stream)")
	maxRecords := fs.Int("max-records", 10000, "read at most `N` records per shard")
	maxAge := fs.Duration("max-age", 0, "exit 1 when a pending transaction record is older than this `DURATION` (0: never)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return e.fail(fmt.Errorf("lag: unexpected argument %q", fs.Arg(0)))
	}
	if *maxRecords < 1 {
		return e.fail(errors.New("lag: --max-records must be at least 1"))
	}
	c, arn, err := e.streamOf(ctx, *streamARN)
	if err != nil {
		return e.fail(err)
	}
	streams, err := e.streams(ctx)
	if err != nil {
		return e.fail(err)
	}
	rows, err := measureLag(ctx, c, streams, e.coordination, arn, *maxRecords, time.Now())
	if err != nil {
		return e.fail(err)
	}
	late := false
	for _, r := range rows {
		if *maxAge > 0 && r.OldestTxn != nil && r.OldestTxnAge > maxAge.Seconds() {
			late = true
		}
	}
	if *asJSON {
		b, _ := json.MarshalIndent(struct {
			Stream string     `json:"stream"`
			Shards []shardLag `json:"shards"`
		}{arn, rows}, "", "  ")
		fmt.Fprintf(e.stdout, "%s\n", b)
	} else {
		fmt.Fprintf(e.stdout, "stream %s\n\n", arn)
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "shard\tstate\towner\tcheckpoint\tlast commit\tpending\tpending txns\toldest txn")
		for _, r := range rows {
			state := "open"
			switch {
			case r.Finished:
				state = "finished"
			case r.Fenced:
				state = "fenced" // waits for `coordination migrate` to end
			case r.Closed:
				state = "closed"
			}
			pending, txns := fmt.Sprint(r.Pending), fmt.Sprint(r.PendingTxns)
			if r.Truncated {
				pending, txns = "≥"+pending, "≥"+txns
			}
			oldest := "-"
			if r.OldestTxn != nil {
				oldest = (time.Duration(r.OldestTxnAge) * time.Second).String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Shard, state, orDash(r.Owner), orDash(r.Checkpoint), orDash(r.LastCommit), pending, txns, oldest)
		}
		tw.Flush()
	}
	if late {
		fmt.Fprintf(e.stderr, "ledgerctl: a pending transaction record is older than %s\n", *maxAge)
		return exitDiff
	}
	return exitOK
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// lagStreams is what measureLag reads from the stream.
type lagStreams interface {
	poller.Streams
}

// measureLag reads the checkpoints and leases of the stream from the
// coordination table coord and every shard after its checkpoint.
func measureLag(ctx context.Context, db QueryAPI, streams lagStreams, coord, arn string, maxRecords int, now time.Time) ([]shardLag, error) {
	leases, cps, err := table.ReadStreamState(ctx, db, coord, arn, nil)
	if err != nil {
		return nil, fmt.Errorf("read checkpoints: %w", err)
	}

	var rows []shardLag
	var start *string
	for {
		out, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arn), ExclusiveStartShardId: start})
		if err != nil {
			return nil, fmt.Errorf("describe stream: %w", err)
		}
		d := out.StreamDescription
		if d == nil {
			return nil, errors.New("describe stream: no description")
		}
		for _, s := range d.Shards {
			id := aws.ToString(s.ShardId)
			cp := cps[id]
			r := shardLag{Shard: id, Parent: aws.ToString(s.ParentShardId), Checkpoint: cp.Position(), LastCommit: cp.UpdatedAt,
				Owner: leases[id].Owner, Finished: cp.Finished, Fenced: cp.Fenced}
			if s.SequenceNumberRange != nil {
				r.Closed = s.SequenceNumberRange.EndingSequenceNumber != nil
			}
			if !r.Finished {
				if err := readPending(ctx, streams, arn, &r, maxRecords, now); err != nil {
					return nil, err
				}
			}
			rows = append(rows, r)
		}
		start = d.LastEvaluatedShardId
		if aws.ToString(start) == "" {
			return rows, nil
		}
	}
}

// readPending reads shard r from after its checkpoint (or its trim horizon)
// to its current end, counting records.
func readPending(ctx context.Context, streams lagStreams, arn string, r *shardLag, maxRecords int, now time.Time) error {
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(arn), ShardId: aws.String(r.Shard), ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon}
	if r.Checkpoint != "" {
		in.ShardIteratorType = streamtypes.ShardIteratorTypeAfterSequenceNumber
		in.SequenceNumber = aws.String(r.Checkpoint)
	}
	it, err := streams.GetShardIterator(ctx, in)
	if err != nil {
		var trimmed *streamtypes.TrimmedDataAccessException
		if errors.As(err, &trimmed) {
			// The checkpoint is older than the stream's retention: count from
			// the trim horizon (what was trimmed is lost; see the runbook).
			in.ShardIteratorType, in.SequenceNumber = streamtypes.ShardIteratorTypeTrimHorizon, nil
			it, err = streams.GetShardIterator(ctx, in)
		}
		if err != nil {
			return fmt.Errorf("shard %s: get iterator: %w", r.Shard, err)
		}
	}
	iter := it.ShardIterator
	for iter != nil && r.Pending < maxRecords {
		out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(int32(min(1000, maxRecords-r.Pending)))})
		if err != nil {
			return fmt.Errorf("shard %s: get records: %w", r.Shard, err)
		}
		for _, rec := range out.Records {
			r.Pending++
			pr := processor.FromStream(rec, arn)
			pk, _ := table.String(pr.Keys, table.AttrPK)
			if !aggregates.IsTransactionKey(pk) {
				continue
			}
			r.PendingTxns++
			if r.OldestTxn == nil && !pr.ApproximateCreation.IsZero() {
				t := pr.ApproximateCreation
				r.OldestTxn = &t
				r.OldestTxnAge = max(0, now.Sub(t).Seconds())
			}
		}
		if len(out.Records) == 0 {
			break // an open shard's current end
		}
		iter = out.NextShardIterator
	}
	r.Truncated = r.Pending >= maxRecords && iter != nil
	return nil
}
