package poller

import "time"

// SetIdleHook makes p's readers call h with every idle wait (the shard, the
// count of empty pages in a row, the wait) instead of waiting: a test's
// virtual clock. Set it before Run.
func SetIdleHook(p *Poller, h func(shard string, n int, d time.Duration)) { p.idleHook = h }

// BudgetPeak is the most of p's records budget ever in use at once.
func BudgetPeak(p *Poller) int { return p.budget.peakUsed() }

// BytesBudgetPeak is the most of p's bytes budget ever in use at once.
func BytesBudgetPeak(p *Poller) int { return p.bytes.peakUsed() }
