package poller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor"
)

// Review of retell (session 25, S25-R4): askedAt was forgotten only for
// eligible shards, so a shard that left the eligible set (finished, gone,
// left by a drain) while this poller's request was last seen on its lease
// kept its entry for good, as did every entry once no shard was eligible
// (assign's early return). No store call is made: nothing is eligible.
func TestReviewS25R4_AskedAtForgetsShardsNoLongerEligible(t *testing.T) {
	proc, err := processor.New(nil, processor.Config{Table: "ledger"}, nil)
	require.NoError(t, err)
	p, err := New(nil, nil, proc, Config{Table: "ledger", StreamARN: "arn:stream", Owner: "x"}, nil)
	require.NoError(t, err)
	p.askedAt["shardId-ended"] = time.Now()
	p.assign(context.Background())
	require.Empty(t, p.askedAt, "askedAt keeps a shard no longer eligible")
}
