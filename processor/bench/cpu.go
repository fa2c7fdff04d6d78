package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/handler"
	"github.com/ledger-dev/ledger/processor/poller"
)

// CPURow is one CPU-only benchmark: records per second on one core.
type CPURow struct {
	Name        string
	Records     int // per iteration
	Iterations  int
	PerSecond   float64
	NsPerRecord float64
	BytesPerRec float64
}

// eventRecords is how many records one recorded Lambda event holds.
const eventRecords = 1000

// record keeps the source records of a workload b stream as Lambda JSON
// records, for the CPU benchmark.
func (r *runner) record(ctx context.Context, streams poller.Streams, arn string) error {
	iter, err := shardIterator(ctx, streams, arn, "")
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
	for _, b := range []struct {
		name string
		fn   func([]byte) (int, error)
	}{
		{"ledger: handler.DecodeEvent + validate + fold", DecodeFold},
		{"floor: encoding/json into events.DynamoDBEvent", DecodeLambdaEvent},
	} {
		r.logf("cpu: %s, %d records from %d recorded", b.name, r.cfg.CPURecords, r.recordN)
		row, err := measure(b.name, payloads, r.cfg.CPURecords, size, r.cfg.CPUTime, b.fn)
		if err != nil {
			return err
		}
		r.logf("    %.0f records/s", row.PerSecond)
		r.res.CPU = append(r.res.CPU, row)
	}
	return nil
}

func measure(name string, payloads [][]byte, records, size int, budget time.Duration, fn func([]byte) (int, error)) (CPURow, error) {
	runtime.GC()
	row := CPURow{Name: name, Records: records, BytesPerRec: float64(size) / float64(records)}
	start := time.Now()
	for row.Iterations == 0 || time.Since(start) < budget {
		for _, p := range payloads {
			if _, err := fn(p); err != nil {
				return row, fmt.Errorf("%s: %w", name, err)
			}
		}
		row.Iterations++
	}
	took := time.Since(start)
	row.PerSecond = float64(records*row.Iterations) / took.Seconds()
	row.NsPerRecord = float64(took.Nanoseconds()) / float64(records*row.Iterations)
	return row, nil
}
