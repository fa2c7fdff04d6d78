package table_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/table"
)

// A worker write carries its poller's part in sharing DescribeStream's
// rate (docs/exactly-once.md, "The first listing's share of
// DescribeStream"): listing while its first listing is under way and the
// listing pollers its rate counts, each removed by the write that no
// longer says it, on every kind of worker write (the claim, the
// heartbeat after it, a renewing poller's write, with offers counted).
func TestWorker_AListingNoteIsWrittenAndRemovedWithTheHeartbeat(t *testing.T) {
	ctx, c, coord := workerTable(t)
	now := time.Now()
	for _, tc := range []struct {
		name    string
		listing bool
		seen    []string
	}{
		{"a claim announcing a listing", true, nil},
		{"a heartbeat acknowledging two listers", true, []string{table.ListingKey("a", "inc-a"), table.ListingKey("b", "inc-b")}},
		{"its listing done, one lister still counted", false, []string{table.ListingKey("b", "inc-b")}},
		{"nothing to say", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := table.HeartbeatWorker(coord, workerArn, "o", "inc-o", 1, true, now)
			if tc.seen != nil {
				in = table.HeartbeatWorkerAgain(coord, workerArn, "o", "inc-o", 1, now)
			}
			in = table.ListingNote(table.OffersCounted(in, []string{"s1"}), tc.listing, tc.seen)
			out, err := c.UpdateItem(ctx, in)
			require.NoError(t, err)
			w := table.DecodeWorker(out.Attributes)
			assert.Equal(t, tc.listing, w.Listing)
			assert.ElementsMatch(t, tc.seen, w.ListingSeen)
			assert.True(t, w.Heartbeat)
		})
	}
	out, err := c.UpdateItem(ctx, table.ListingNote(table.RenewWorkerAgain(coord, workerArn, "r", "inc-r", 0, now), false, []string{table.ListingKey("o", "inc-o")}))
	require.NoError(t, err)
	w := table.DecodeWorker(out.Attributes)
	assert.False(t, w.Listing)
	assert.Equal(t, []string{"o#inc-o"}, w.ListingSeen, "a renewing poller acknowledges")
}
