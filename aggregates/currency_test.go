package aggregates

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/text/currency"
)

func TestValidateCurrency_ISOCodesInUpperCaseButNoMoneyAndAddedSinceCLDR32(t *testing.T) {
	tests := []struct {
		code    string
		wantErr string // "" accepted
	}{
		{"BRL", ""}, {"GBP", ""}, {"JPY", ""}, {"BHD", ""}, {"EUR", ""}, {"USD", ""},
		{"CLF", ""},              // a fund code
		{"DEM", ""}, {"VEF", ""}, // historic codes
		{"VES", ""}, {"MRU", ""}, // added to ISO 4217 after CLDR 32
		{"SLE", ""}, {"ZWG", ""}, {"XCG", ""}, {"VED", ""}, {"UYW", ""},
		{"XAF", ""}, {"XOF", ""}, {"XCD", ""}, {"XPF", ""}, // X-codes that are currencies
		{"brl", "upper case (BRL)"}, {"Brl", "upper case (BRL)"},
		{"XXX", "not a currency"}, {"XTS", "not a currency"}, {"XAU", "not a currency"}, {"XDR", "not a currency"},
		{"ZZZ", "not an ISO 4217 currency code"}, {"AAA", "not an ISO 4217 currency code"},
		{"", "three upper-case letters"}, {"BR", "three upper-case letters"}, {"BRLX", "three upper-case letters"},
		{" BRL", "three upper-case letters"}, {"BR1", "three upper-case letters"}, {"ÉUR", "three upper-case letters"},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			err := ValidateCurrency(tt.code)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestCurrencyDigits_ISOMinorUnit(t *testing.T) {
	for code, want := range map[string]int{
		"JPY": 0, "KRW": 0, "CLP": 0, "BRL": 2, "GBP": 2, "EUR": 2, "BHD": 3, "KWD": 3, "TND": 3, "CLF": 4,
		"VES": 2, "MRU": 2, "UYW": 4, "SLE": 2,
		"IQD": 3, "COP": 2, "IDR": 2, "PKR": 2, // ISO's minor unit where CLDR has 0
		"ISK": 0, "VND": 0, "XAF": 0, "UGX": 0,
		"ITL": 0, "DEM": 2, // historic: CLDR's
	} {
		assert.Equal(t, want, CurrencyDigits(code), code)
	}
}

func TestCheckAmountDigits_TrailingZerosAreNoDigits(t *testing.T) {
	tests := []struct {
		amount, code string
		ok           bool
	}{
		{"10", "JPY", true}, {"10.000", "JPY", true}, {"10.5", "JPY", false}, {"0.1", "JPY", false},
		{"1.234", "BHD", true}, {"1.2340", "BHD", true}, {"1.2345", "BHD", false},
		{"0.01", "BRL", true}, {"0.001", "BRL", false}, {"1E+3", "BRL", true}, {"1E-3", "BRL", false},
		{"0.0001", "CLF", true}, {"0.00001", "CLF", false},
		{"1500.5", "COP", true}, {"1.125", "IQD", true}, {"1.1255", "IQD", false},
	}
	for _, tt := range tests {
		err := CheckAmountDigits(dec(tt.amount), tt.code)
		if tt.ok {
			assert.NoError(t, err, "%s %s", tt.amount, tt.code)
		} else {
			assert.Error(t, err, "%s %s", tt.amount, tt.code)
		}
	}
}

// TestValidateCurrency_EveryCodeOfThePackageButNoMoney: every currency
// golang.org/x/text/currency lists (current and historic, tender or not)
// is accepted, with 0 to 4 fraction digits, unless it is one of notMoney.
func TestValidateCurrency_EveryCodeOfThePackageButNoMoney(t *testing.T) {
	seen := map[string]bool{}
	for it := currency.Query(currency.Historical, currency.NonTender); it.Next(); {
		code := it.Unit().String()
		err := ValidateCurrency(code)
		if notMoney[code] {
			assert.Error(t, err, code)
			continue
		}
		seen[code] = true
		if assert.NoError(t, err, code) {
			assert.True(t, CurrencyDigits(code) >= 0 && CurrencyDigits(code) <= 4, "%s: %d digits", code, CurrencyDigits(code))
		}
	}
	assert.Greater(t, len(seen), 250, "the package's list")
	for code := range addedSinceCLDR32 {
		_, err := currency.ParseISO(code)
		assert.Error(t, err, "%s: the package knows it now; take it out of addedSinceCLDR32", code)
	}
}

// TestCurrencyDigits_MatchISO4217ListOne checks every current ISO 4217 code
// against its minor unit (testdata/iso4217-list-one.tsv, from SIX's list
// one): a code with a minor unit is accepted with exactly that many fraction
// digits, a code whose minor unit is N.A. is refused.
func TestCurrencyDigits_MatchISO4217ListOne(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "iso4217-list-one.tsv"))
	require.NoError(t, err)
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		code, unit, ok := strings.Cut(line, "\t")
		require.True(t, ok, line)
		n++
		if unit == "-" {
			assert.Error(t, ValidateCurrency(code), code)
			continue
		}
		want, err := strconv.Atoi(unit)
		require.NoError(t, err, line)
		if assert.NoError(t, ValidateCurrency(code), code) {
			assert.Equal(t, want, CurrencyDigits(code), code)
		}
	}
	assert.Greater(t, n, 170, "the list holds every current code")
}
