package bench

import (
	"testing"
)

// benchPayloads is 100,000 records of workload b (synthesized as the stream
// would carry them), as Lambda events of 1,000.
func benchPayloads(b *testing.B) ([][]byte, int) {
	b.Helper()
	recs, err := LambdaRecords(WorkloadB.Generate(10000, 6))
	if err != nil {
		b.Fatal(err)
	}
	payloads, size, err := Payloads(recs, 100_000)
	if err != nil {
		b.Fatal(err)
	}
	return payloads, size
}

func benchPath(b *testing.B, fn func([]byte) (int, error)) {
	payloads, size := benchPayloads(b)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range payloads {
			if _, err := fn(p); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(100_000*b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkCPU compares, side by side, the project's decode + validate +
// fold of 100,000 records with plain encoding/json decoding of the same
// bytes into events.DynamoDBEvent (per core: run with -cpu 1):
//
//	go test ./bench -run '^$' -bench CPU -cpu 1
func BenchmarkCPU(b *testing.B) {
	b.Run("DecodeFold", func(b *testing.B) { benchPath(b, DecodeFold) })
	b.Run("EncodingJSONFloor", func(b *testing.B) { benchPath(b, DecodeLambdaEvent) })
}
