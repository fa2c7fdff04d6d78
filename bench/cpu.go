package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/handler"
	"github.com/ledger-dev/ledger/processor/poller"
)

// CPURow is one CPU-only benchmark: records per second on one core.
type CPURow struct {
	Name        string
	Records     int // per round
	Rounds      int
	PerSecond   float64 // in the median round
	Fastest     float64 // in the fastest round
	NsPerRecord float64 // in the median round
	BytesPerRec float64
}

// eventRecords is how many records one recorded Lambda event holds.
const eventRecords = 1000

// record keeps the source records of a workload b stream as Lambda JSON
// records, for the CPU benchmark.
func (r *runner) record(ctx context.Context, streams poller.Streams, arn string) error {
	iter, _, err := shardIterator(ctx, streams, arn, "")
	if err != nil {
		return err
	}
	var recs []events.DynamoDBEventRecord
	for iter != nil {
		out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(1000)})
		if err != nil {
			return err
		}
		if len(out.Records) == 0 {
			break
		}
		for _, sr := range out.Records {
			lr, err := processor.ToLambda(processor.FromStream(sr, arn))
			if err != nil {
				return err
			}
			lr.AWSRegion = "us-east-1"
			recs = append(recs, lr)
		}
		iter = out.NextShardIterator
	}
	if r.recorded, err = json.Marshal(recs); err != nil {
		return err
	}
	r.recordN = len(recs)
	return nil
}

// Payloads returns n recorded records, cycled, each with its own eventID and
// sequence number, as Lambda events of up to 1,000 records.
func Payloads(recorded []events.DynamoDBEventRecord, n int) ([][]byte, int, error) {
	var out [][]byte
	size := 0
	for i := 0; i < n; i += eventRecords {
		ev := events.DynamoDBEvent{Records: make([]events.DynamoDBEventRecord, 0, eventRecords)}
		for j := i; j < min(n, i+eventRecords); j++ {
			rec := recorded[j%len(recorded)]
			rec.EventID = fmt.Sprintf("cpu-%d", j)
			rec.Change.SequenceNumber = fmt.Sprintf("%021d", j+1)
			ev.Records = append(ev.Records, rec)
		}
		raw, err := json.Marshal(ev)
		if err != nil {
			return nil, 0, err
		}
		size += len(raw)
		out = append(out, raw)
	}
	return out, size, nil
}

// DecodeFold is the project's CPU path for one Lambda event: the handler's
// one-pass decoder, the processor's validation and the fold into
// per-report deltas. It returns the reports touched.
func DecodeFold(payload []byte) (int, error) {
	ev, err := handler.DecodeEvent(payload)
	if err != nil {
		return 0, err
	}
	f := aggregates.NewFold()
	for i := range ev.Records {
		f.AddChange(processor.Transactions(ev.Records[i]))
	}
	return len(f.Keys()), nil
}

// DecodeLambdaEvent is the floor of any Go consumer that starts from the
// Lambda JSON: encoding/json into aws-lambda-go's event type, nothing else.
func DecodeLambdaEvent(payload []byte) (int, error) {
	var ev events.DynamoDBEvent
	err := json.Unmarshal(payload, &ev)
	return len(ev.Records), err
}

// cpu runs the two CPU benchmarks side by side on one core.
func (r *runner) cpu() error {
	if r.recorded == nil {
		r.logf("cpu: no workload b was run; skipped")
		return nil
	}
	var recorded []events.DynamoDBEventRecord
	if err := json.Unmarshal(r.recorded, &recorded); err != nil {
		return err
	}
	payloads, size, err := Payloads(recorded, r.cfg.CPURecords)
	if err != nil {
		return err
	}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	paths := []struct {
		name string
		fn   func([]byte) (int, error)
	}{
		{"ledger: handler.DecodeEvent + validate + fold", DecodeFold},
		{"floor: encoding/json into events.DynamoDBEvent", DecodeLambdaEvent},
	}
	r.logf("cpu: %d records from %d recorded, the two paths in alternating rounds for %s", r.cfg.CPURecords, r.recordN, 2*r.cfg.CPUTime)
	rounds := make([][]time.Duration, len(paths))
	start := time.Now()
	for len(rounds[0]) < 3 || time.Since(start) < 2*r.cfg.CPUTime {
		for i, p := range paths {
			d, err := round(payloads, p.fn)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			rounds[i] = append(rounds[i], d)
		}
	}
	for i, p := range paths {
		ds := rounds[i]
		slices.Sort(ds)
		row := CPURow{Name: p.name, Records: r.cfg.CPURecords, Rounds: len(ds), BytesPerRec: float64(size) / float64(r.cfg.CPURecords)}
		row.PerSecond = float64(r.cfg.CPURecords) / ds[len(ds)/2].Seconds()
		row.Fastest = float64(r.cfg.CPURecords) / ds[0].Seconds()
		row.NsPerRecord = float64(ds[len(ds)/2].Nanoseconds()) / float64(r.cfg.CPURecords)
		r.logf("    %s: %.0f records/s (median of %d rounds), fastest %.0f", p.name, row.PerSecond, row.Rounds, row.Fastest)
		r.res.CPU = append(r.res.CPU, row)
	}
	return nil
}

// round runs fn over every payload once and returns the time it took.
func round(payloads [][]byte, fn func([]byte) (int, error)) (time.Duration, error) {
	runtime.GC()
	start := time.Now()
	for _, p := range payloads {
		if _, err := fn(p); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// LambdaRecords returns the stream records ops would produce, in the Lambda
// event's shape, without a DynamoDB: for benchmarks that need no recording.
func LambdaRecords(ops []Op) ([]events.DynamoDBEventRecord, error) {
	out := make([]events.DynamoDBEventRecord, len(ops))
	now := time.Now()
	for i, op := range ops {
		r := processor.Record{
			EventID: fmt.Sprintf("op-%d", i), SequenceNumber: fmt.Sprintf("%021d", i+1), StreamViewType: "NEW_AND_OLD_IMAGES",
			Keys:     map[string]ddbtypes.AttributeValue{"PK": sAV(op.Key.PK), "SK": sAV(op.Key.SK)},
			OldImage: op.Old, ApproximateCreation: now.Truncate(time.Minute),
		}
		if op.New != nil {
			r.NewImage = stamped(op.New, now)
		}
		switch op.Kind {
		case OpInsert:
			r.EventName = "INSERT"
		case OpModify:
			r.EventName = "MODIFY"
		default:
			r.EventName = "REMOVE"
		}
		lr, err := processor.ToLambda(r)
		if err != nil {
			return nil, err
		}
		out[i] = lr
	}
	return out, nil
}
