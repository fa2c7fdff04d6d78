package handler_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/handler"
)

// benchEvent is a Lambda event of n records cycled from the fixtures, each
// with its own eventID and sequence number.
func benchEvent(b *testing.B, n int) []byte {
	b.Helper()
	src := allFixtureRecords(b)
	recs := make([]events.DynamoDBEventRecord, n)
	for i := range recs {
		r := src[i%len(src)]
		r.EventID = fmt.Sprintf("bench-%d", i)
		r.Change.SequenceNumber = fmt.Sprintf("%021d", i+1)
		recs[i] = r
	}
	raw, err := json.Marshal(events.DynamoDBEvent{Records: recs})
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// BenchmarkDecode compares the handler's one-pass decoder with the
// aws-lambda-go path (encoding/json into events.DynamoDBEvent, then
// processor.FromLambda per record) on an event of 10,000 records:
//
//	go test ./processor/handler -run '^$' -bench Decode -benchmem
func BenchmarkDecode(b *testing.B) {
	const n = 10000
	payload := benchEvent(b, n)
	b.Run("DecodeEvent", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for b.Loop() {
			ev, err := handler.DecodeEvent(payload)
			if err != nil || len(ev.Records) != n {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("FromLambda", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for b.Loop() {
			var ev events.DynamoDBEvent
			if err := json.Unmarshal(payload, &ev); err != nil {
				b.Fatal(err)
			}
			recs := make([]processor.Record, len(ev.Records))
			for i, r := range ev.Records {
				recs[i] = processor.FromLambda(r)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
	})
}
