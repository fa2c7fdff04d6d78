package poller_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/ledger-dev/ledger/processor/poller"
)

// Hole R5 (records the LATEST start skipped are applied). A fleet started
// at LATEST records a marker on each open shard's checkpoint (startAt =
// LATEST, no sequence number) so that restarts honour it whatever their
// configuration. takeShare reads a shard's own checkpoint before taking
// it, so startReaders sees the marker; takeOffers does not, so a poller
// that receives a shard by a hand-over (balance, a leaver's handOverAll)
// before any record was committed on it, and did not read every
// checkpoint itself (a poller started with the default TRIM_HORIZON
// after the fleet's LATEST start: a deploy without the flag), opens it at
// TRIM_HORIZON and applies the records the LATEST start skipped.
//
// Fix: takeOffers reads the offered shard's checkpoint before the take, as
// takeShare does (one consistent read per offer), or startReaders opens
// at LATEST whenever the checkpoint it did not read says so (the reader's
// own read of the checkpoint, released(), returns startAt too).
func TestPoller_AShardHandedOverBeforeItsFirstCommitKeepsItsLatestStart(t *testing.T) {
	// R5, fixed: takeOffers reads the offered shard's own checkpoint.
	e := newEnv(t, 1544)
	f := e.stream
	ids := []string{"shardId-R5-0", "shardId-R5-1"}
	for _, id := range ids {
		f.addShard(id, "")
	}
	f.split(ids, e.write(t, 20)) // written before the LATEST start: skipped
	a := e.poller(t, "a", nil, nil, func(c *poller.Config) { c.StartPosition = poller.Latest })
	stopA := start(t, a)
	eventually(t, "a holds both shards, at LATEST", 20*time.Second, func() bool { return counter(t, a.m.LeasesHeld) == 2 })
	b := e.poller(t, "b", nil, nil, nil) // the default, TRIM_HORIZON
	stopB := start(t, b)
	eventually(t, "b was handed a shard and read it", 20*time.Second, func() bool {
		if counter(t, b.m.LeasesHeld) != 1 {
			return false
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		n := 0
		for _, r := range f.reads {
			if r.owner == "b" {
				n++
			}
		}
		return n >= 3
	})
	stopB()
	stopA()
	assert.Zero(t, handled(t, b), "records written before the fleet's LATEST start, applied by the poller the shard was handed to")
	assert.Zero(t, handled(t, a), "records written before the LATEST start, applied by the poller that started there")
}
