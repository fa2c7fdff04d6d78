package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ledger-dev/ledger/processor/poller"
)

// A drain whose work is done but that met records it could not commit
// (poller.DrainLossError) exits 4, saying which shards and what to run;
// also when the metrics server's error is joined to it (run). Other
// failures keep their statuses. DynamoDB Local's stream is never trimmed,
// so the built binary's drain cannot be made to meet a trim here: the
// processor/poller trim tests pin the error, this the status it maps to.
func TestRun_ADrainThatLostRecordsExitsFour(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lost := &poller.DrainLossError{
		Trims: []poller.DrainTrim{{Shard: "shardId-A", After: "100"}, {Shard: "shardId-A", After: "250"}, {Shard: "shardId-B"}},
		Gone:  []poller.DrainGone{{Shard: "shardId-C", Checkpoint: "42"}},
	}
	for name, err := range map[string]error{
		"alone":               lost,
		"with a server error": errors.Join(lost, errors.New("metrics server: boom")),
	} {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			assert.Equal(t, exitDrainLost, failed(err, log, &stderr))
			assert.Equal(t, 4, exitDrainLost)
			for _, want := range []string{"shardId-A after 100, 250", "shardId-B after its start", "shardId-C checkpoint 42",
				"3 trim(s) met on 2 shard(s)", "ledgerctl reconcile --repair"} {
				assert.Contains(t, stderr.String(), want)
			}
		})
	}
	assert.Contains(t, usageHead, "4 when a drain's work is done", "the usage text documents the status")
	// A gap another consumer counted during the drain, alone (review of
	// session 24, S24-L2).
	var counted bytes.Buffer
	assert.Equal(t, exitDrainLost, failed(&poller.DrainLossError{Counted: 2}, log, &counted))
	assert.Contains(t, counted.String(), "2 gap(s) of trimmed records counted during the drain")
	var stderr bytes.Buffer
	assert.Equal(t, exitError, failed(errors.New("stream gone"), log, &stderr))
	assert.Equal(t, exitOwnerInUse, failed(&poller.OwnerInUseError{Owner: "x"}, log, &stderr))
}
