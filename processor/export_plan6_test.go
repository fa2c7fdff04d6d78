package processor

// PlanLayoutsForFigure is planLayoutsForFigure for the external tests
// (BenchmarkPlanLayouts_CatchUp, which plans bench's workload: bench
// imports processor).
var PlanLayoutsForFigure = planLayoutsForFigure
