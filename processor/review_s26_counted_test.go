package processor_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Review (adversarial, session 26) of step R as built (docs/exactly-once.md,
// "Review (adversarial, session 26): step R as built").

// S26-R1: the lost-answer recognition of R6 took `repaired = id` left by
// this repair's own earlier transaction, with an epoch another writer moved
// (an abandoned rebase: SET epoch + 1, REMOVE rebasing), for the landing of
// a later transaction that never landed. R6 of two transactions: the first
// lands (epoch E+1, repaired = id); before the second, a rebase pins the
// branch and is abandoned (epoch E+2); the second is cancelled; the re-read
// finds epoch E+2 = E + 2 and repaired = id: "landed". The repair returned
// success with the second transaction's reports not written. Fixed: each
// transaction sets repaired to its own token (the id, the round and j).
func TestReviewS26_R1_AnAbandonBetweenTwoTransactionsIsNotTakenForTheSecond(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	const days = 100
	for i := range days {
		writeTxn(t, e, "c", start.AddDate(0, 0, i).Format("2006-01-02"), fmt.Sprintf("t%d", i), "10")
	}
	c := newConsumer(t, e, "marker", nil, processor.Config{})
	c.pass()
	markRebased(t, e, "c")
	for i := range days {
		damage(t, e, reportKey("c", aggregates.Daily, start.AddDate(0, 0, i).Format("2006-01-02")), "1")
	}
	coord := table.CoordinationTableName(e.table)
	var txs atomic.Int64
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op == "TransactWriteItems" && txs.Add(1) == 2 {
			// A rebase pinned and abandoned between the two transactions.
			_, err := e.ddb.UpdateItem(ctx, table.RebasePin(coord, "t", "c", "rb-r1"))
			require.NoError(t, err)
			_, err = e.ddb.UpdateItem(ctx, table.AbandonRebase(coord, "t", "c", "rb-r1"))
			require.NoError(t, err)
		}
		return ledgertest.Pass
	}
	res, err := countedRepair(t, e.faulty, e, "c", nil)
	e.faults.Decide = nil
	require.NoError(t, err)
	t.Logf("rounds %d, transactions %d, reports %d", res.Rounds, res.Transactions, res.Reports)
	assert.Equal(t, 2, res.Rounds, "the second transaction did not land: a new round")
	e.requireReconciled(t)
}
