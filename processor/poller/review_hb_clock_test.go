package poller

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/ledger-dev/ledger/table"
)

// The review of the worker heartbeat (docs/exactly-once.md, "Review
// (adversarial, session 16): the worker heartbeat"), HB3: a reader's
// validity is measured on the monotonic clock, in every lease mode. The
// taker measures its lease duration between two of its reads on its
// monotonic clock (workerView.at and .last, seen's at and last: instants
// from time.Now); the owner's validity must be measured on the same kind
// of clock, or a wall clock stepped back by d on the owner (NTP, a VM's
// clock set after a resume) keeps its readers d past the lease the taker
// has taken over. The heartbeat kept the validities in atomics as Unix
// nanos (time.Unix(0, n): a wall-clock instant, its monotonic reading
// lost), which this test catches: an instant read back from the atomics
// must carry a monotonic reading ("m=±…" in its String, the time
// package's documented form), and be the instant stored.
func TestValidity_IsMeasuredOnTheMonotonicClock(t *testing.T) {
	const d = 20 * time.Second
	for _, tc := range []struct {
		name   string
		mode   LeaseMode
		compat bool
	}{
		{"heartbeat", LeaseModeHeartbeat, false},
		{"heartbeat in compat", LeaseModeHeartbeat, true},
		{"renew", LeaseModeRenew, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Poller{cfg: Config{LeaseDuration: d, LeaseMode: tc.mode}}
			p.compat.Store(tc.compat)
			sent := time.Now()
			p.beaten(table.Worker{}, sent)
			h := &holding{}
			h.setUntil(sent.Add(d + time.Second))
			v := p.validity(h)
			assert.Contains(t, v.String(), " m=", "validity %s has no monotonic clock reading", v)
			want := sent.Add(d)
			if tc.mode == LeaseModeRenew {
				want = sent.Add(d + time.Second)
			}
			assert.True(t, v.Equal(want), "validity %s, want %s", v, want)
			// The duration left is what the monotonic clock says: a wall
			// clock stepped meanwhile would not change it.
			left := time.Until(v)
			assert.True(t, left > 0 && left <= want.Sub(sent), "left %s", left)
			assert.False(t, strings.Contains(time.Unix(0, want.UnixNano()).String(), " m="), "the wall-clock form the atomics held before")
		})
	}
}
