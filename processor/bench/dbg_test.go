package bench

import (
	"context"
	"os"
	"testing"
)

func TestDbg(t *testing.T) {
	cfg := Full()
	cfg.Workloads = []WorkloadRun{{WorkloadB, 10000}}
	cfg.BatchSizes = []int{1000}
	cfg.Only = []Approach{LedgerPoller, LedgerLambda}
	cfg.SkipLag, cfg.Backlog = true, 0
	cfg.Log = os.Stderr
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	res.Markdown(os.Stderr)
}
