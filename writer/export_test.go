package writer

import (
	"maps"
	"slices"
)

// ProblemTypes lists every problem type the writer has (for the external
// tests: the document must list each).
func ProblemTypes() []string { return slices.Sorted(maps.Keys(problemTitles)) }
