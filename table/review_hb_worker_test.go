package table_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"

	"github.com/ledger-dev/ledger/table"
)

// A worker item says its poller heartbeats only while the mark is at the
// beat the heartbeat wrote it with (the review of the heartbeat, HB2): an
// older version's write (a rollback under the same owner name) adds to the
// beat and leaves leaseMode, and must not read as a heartbeat owner.
func TestDecodeWorker_TheHeartbeatMarkHoldsOnlyAtItsBeat(t *testing.T) {
	for _, tc := range []struct {
		name           string
		mode           string
		beat, modeBeat int64
		left           bool
		want           bool
	}{
		{"written by the heartbeat", table.LeaseModeHeartbeat, 7, 7, false, true},
		{"left after its last heartbeat", table.LeaseModeHeartbeat, 8, 7, true, true},
		{"an older version's heartbeat since", table.LeaseModeHeartbeat, 8, 7, false, false},
		{"an older version's heartbeats and leave since", table.LeaseModeHeartbeat, 12, 7, true, false},
		{"a mark without its beat (before modeBeat)", table.LeaseModeHeartbeat, 7, 0, false, false},
		{"no mark", "", 7, 7, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			item := map[string]types.AttributeValue{
				table.AttrWorkerOwner: table.S("x"),
				table.AttrWorkerBeat:  table.Int(tc.beat),
			}
			if tc.mode != "" {
				item[table.AttrWorkerMode] = table.S(tc.mode)
				if tc.modeBeat != 0 {
					item[table.AttrWorkerModeBeat] = table.Int(tc.modeBeat)
				}
			}
			if tc.left {
				item[table.AttrWorkerLeft] = table.Bool(true)
			}
			assert.Equal(t, tc.want, table.DecodeWorker(item).Heartbeat)
		})
	}
}
