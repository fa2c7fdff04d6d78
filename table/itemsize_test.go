package table

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNumberSize_PairsOfDigitsAlignedOnThePoint(t *testing.T) {
	tests := map[string]int{
		"0": 1, "-0": 1, "0.0": 1, "5": 2, "12": 2, "120": 3, "100": 2, "1200": 2, "1.10": 3, "1.1": 3,
		"0.10": 2, "0.01": 2, "1234.5": 4, "12345": 4, "-5": 3, "-1.10": 4, "1E+3": 2,
		"99999999999999999999": 11,
	}
	for s, want := range tests {
		assert.Equal(t, want, numberSize(s), s)
	}
}
