package processor_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// trimmedStream hides the records before seq: the stream trimmed them
// (older than its retention).
type trimmedStream struct {
	*dynamodbstreams.Client
	hideBefore string
}

func (s *trimmedStream) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	out, err := s.Client.GetRecords(ctx, in, opts...)
	if err == nil {
		keep := out.Records[:0]
		for _, r := range out.Records {
			if processor.CompareSequence(aws.ToString(r.Dynamodb.SequenceNumber), s.hideBefore) >= 0 {
				keep = append(keep, r)
			}
		}
		out.Records = keep
	}
	return out, err
}

// A standard-mode run's marker is also written under its last record
// (docs/exactly-once.md, "The design: counted changes", P), and the
// in-flight check looks up both keys: once the run's first record is
// trimmed, its later records are still found committed by the run's end,
// while a record no run holds is still in flight.
func TestInFlight_ARunWhoseFirstRecordIsTrimmedIsCoveredByItsEnd(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for _, id := range []string{"a", "b", "c"} {
		putTxn(t, e, "x", "2024-04-01", id, "10", "rent", "")
	}
	_, all := e.records(t)
	require.Len(t, all, 4, "the flags item, a, b, c")
	recs := all[1:] // a, b, c
	p := e.processor(t, nil, nil)
	res, err := p.Process(ctx, p.MarkerGuard(), all)
	require.NoError(t, err)
	require.Equal(t, 1, res.Runs, "one run of three records")

	// Its two markers: under the first record, and under the last.
	for _, k := range []aggregates.Key{aggregates.RunMarkerKey(recs[0].EventID), aggregates.RunEndMarkerKey(recs[2].EventID)} {
		out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &e.table, Key: table.Key(k), ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		require.NotNil(t, out.Item, "marker %s", k)
		first, last, ok := table.RunMarkerSpan(out.Item)
		require.True(t, ok)
		assert.Equal(t, recs[0].SequenceNumber, first)
		assert.Equal(t, recs[2].SequenceNumber, last)
	}

	putTxn(t, e, "x", "2024-04-02", "d", "7", "rent", "") // written, not committed

	for _, tc := range []struct {
		name       string
		hideBefore string
	}{
		{"nothing trimmed", ""},
		{"the run's first record trimmed", recs[1].SequenceNumber},
		{"all but the run's last record trimmed", recs[2].SequenceNumber},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var streams processor.StreamReader = e.streams
			if tc.hideBefore != "" {
				streams = &trimmedStream{Client: e.streams, hideBefore: tc.hideBefore}
			}
			fl, err := p.InFlight(ctx, streams, e.streamARN, 0)
			require.NoError(t, err)
			assert.Equal(t, 1, fl.Branches[processor.Scope{Tenant: "t", Branch: "x"}], "only d is in flight")
		})
	}
}
