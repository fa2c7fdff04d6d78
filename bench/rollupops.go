package bench

// RollupOps returns the changes `ledgerbench rollups` writes: workload c's
// first n changes over days days for seed, each branch's currency dealt as
// RollupCurrencies says (rollupOps). Plan figures that must plan the same
// batches as the benchmark's cells use it (processor,
// BenchmarkPlanLayouts_CatchUp).
func RollupOps(n, days int, seed uint64) []Op { return rollupOps(n, days, seed) }
