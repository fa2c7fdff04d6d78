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

// Review (adversarial, session 27), hole S27-J1: a process of a version
// before the listing note that claims a worker item (a rollback, or a
// rolling update of pollers with fixed names) writes the item with an
// update that leaves the attributes it does not know in place. Before the
// fix its item went on announcing the listing of the process before it
// (the others weighed it 8 for as long as it lived) and acknowledging the
// listings that process's rate counted, which the older process's rate
// does not (it shares by head count): a lister read the stale
// acknowledgement as this poller's and weighed itself 8 (at 8 pollers, a
// lister and seven rolled-back ones: 8 × 8/15 + 7 × 1 ≈ 11.3 calls a
// second, past AWS's 10). Now the note is signed by its writer's
// incarnation and read only while that is the item's.
func TestReviewS27J1_AnOlderVersionsClaimInheritsNoListingNote(t *testing.T) {
	ctx, c, coord := workerTable(t)
	now := time.Now()
	seen := []string{table.ListingKey("i", "inc-i")}
	_, err := c.UpdateItem(ctx, table.ListingNote(table.HeartbeatWorker(coord, workerArn, "j", "inc-1", 1, true, now), true, seen))
	require.NoError(t, err)
	// The older version's claim: HeartbeatWorker alone, a new incarnation.
	out, err := c.UpdateItem(ctx, table.HeartbeatWorker(coord, workerArn, "j", "inc-2", 1, true, now))
	require.NoError(t, err)
	w := table.DecodeWorker(out.Attributes)
	assert.Equal(t, "inc-2", w.Incarnation)
	assert.False(t, w.Listing, "an older version's process announces no listing")
	assert.Empty(t, w.ListingSeen, "an older version's process acknowledges no listing")
	// A process of this version claiming it again writes its own note.
	out, err = c.UpdateItem(ctx, table.ClaimedFrom(table.ListingNote(table.HeartbeatWorker(coord, workerArn, "j", "inc-3", 1, true, now), false, seen), "inc-2"))
	require.NoError(t, err)
	w = table.DecodeWorker(out.Attributes)
	assert.False(t, w.Listing)
	assert.Equal(t, seen, w.ListingSeen)
	// Its note removed: nothing of it is left in the item.
	out, err = c.UpdateItem(ctx, table.ListingNote(table.HeartbeatWorkerAgain(coord, workerArn, "j", "inc-3", 1, now), false, nil))
	require.NoError(t, err)
	for _, a := range []string{table.AttrWorkerListing, table.AttrWorkerListingSeen, table.AttrWorkerListingBy} {
		assert.NotContains(t, out.Attributes, a)
	}
}
