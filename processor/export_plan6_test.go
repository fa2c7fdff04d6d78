package processor

// PlanLayoutsForFigure is planLayoutsForFigure for the external tests
// (BenchmarkPlanLayouts_CatchUp, which plans bench's workload: bench
// imports processor).
var PlanLayoutsForFigure = planLayoutsForFigure

// PlanOldLayoutForTest makes p plan new batches under the layout before 6
// (4, or 3 with roll-ups off): a batch it leaves pending is one the
// current code must finish as planned.
func PlanOldLayoutForTest(p *Processor) { p.oldLayout = true }
