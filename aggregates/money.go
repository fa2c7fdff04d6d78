package aggregates

import (
	"fmt"
	"strings"

	"github.com/shopspring/decimal"
)

// MaxDigits is DynamoDB's number precision: 38 significant digits.
const MaxDigits = 38

// ParseAmount parses a DynamoDB number string exactly (no float64 anywhere):
// an optional sign, digits with an optional fraction, an optional exponent,
// at most 38 significant digits. "1.10" and "1.1" are equal amounts.
func ParseAmount(s string) (decimal.Decimal, error) {
	if s == "" || strings.TrimSpace(s) != s {
		return decimal.Decimal{}, fmt.Errorf("amount %q is not a number", s)
	}
	d, err := decimal.NewFromString(s)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("amount %q is not a number", s)
	}
	if n := significantDigits(d); n > MaxDigits {
		return decimal.Decimal{}, fmt.Errorf("amount %q has %d significant digits, more than %d", s, n, MaxDigits)
	}
	return d, nil
}

// significantDigits counts the digits of d's coefficient without leading or
// trailing zeros.
func significantDigits(d decimal.Decimal) int {
	c := d.Coefficient().String()
	c = strings.TrimLeft(c, "-0")
	c = strings.TrimRight(c, "0")
	return len(c)
}

// The range of a transaction amount. Reports keep sums in DynamoDB numbers
// of at most 38 significant digits, so amounts are bounded to leave room:
// at most 22 integer digits and 8 fraction digits make every sum of up to
// 10^8 amounts fit exactly. An amount outside the range is a valid number
// but not a valid transaction amount.
const (
	MaxAmountIntegerDigits  = 22
	MaxAmountFractionDigits = 8
)

// CheckAmountRange reports whether d is within the transaction amount range.
func CheckAmountRange(d decimal.Decimal) error {
	intPart, frac, _ := strings.Cut(strings.TrimPrefix(d.String(), "-"), ".")
	if n := len(strings.TrimLeft(intPart, "0")); n > MaxAmountIntegerDigits {
		return fmt.Errorf("amount has %d integer digits, more than %d", n, MaxAmountIntegerDigits)
	}
	if len(frac) > MaxAmountFractionDigits {
		return fmt.Errorf("amount has %d fraction digits, more than %d", len(frac), MaxAmountFractionDigits)
	}
	return nil
}

// FormatAmount formats d canonically for storage and comparison: no exponent,
// no trailing fractional zeros ("1.10" → "1.1", "100" stays "100").
func FormatAmount(d decimal.Decimal) string { return d.String() }
