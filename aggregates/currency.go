package aggregates

import (
	"fmt"
	"strings"

	"github.com/shopspring/decimal"
	"golang.org/x/text/currency"
)

// A branch's currency (issue 24) is an ISO 4217 alphabetic code, three
// upper-case letters, and every amount of its transactions is in it. The
// codes accepted are
//
//   - those golang.org/x/text/currency knows (currency.ParseISO). Its tables
//     are CLDR 32's (2017): every ISO 4217 code current then (BRL, GBP, JPY,
//     BHD…), ISO 4217's historic codes (DEM, FRF, VEF…: a branch may keep
//     its books in one; CLDR adds a few historic ones ISO never listed, such
//     as ISJ) and ISO's fund codes (BOV, CLF, USN…);
//   - but not the codes that are no money, ISO 4217's "N.A." minor unit:
//     precious metals (XAU, XAG, XPD, XPT), bond-market and other units of
//     account (XBA–XBD, XDR, XSU, XUA, XEU, and CLDR's XFO, XFU, XRE), the
//     testing code XTS and XXX, "no currency" (notMoney);
//   - and the codes ISO 4217 added after CLDR 32, which the package does not
//     know (addedSinceCLDR32): MRU, VES, UYW, VED, SLE, ZWG, XCG.
//
// A code in lower or mixed case ("brl") is refused, not normalised: codes
// are stored and compared as given, like every other code of the API
// (INCOME, DAILY).
//
// A currency's fraction digits (CurrencyDigits) are ISO 4217's minor unit:
// JPY 0, BRL 2, BHD 3, CLF 4. The package's standard digits
// (currency.Standard.Rounding) are CLDR's, and CLDR gives fewer than ISO
// where the minor unit is out of use in cash or display (COP, IDR, PKR,
// IQD… 0); a ledger keeps the amounts of invoices and bank statements,
// which use ISO's, so those codes take theirs from a table
// (cldrBelowISO). An amount has at most that many fraction digits.

// notMoney are the codes currency.ParseISO knows that are not a currency an
// amount can be in.
var notMoney = map[string]bool{
	"XAG": true, "XAU": true, "XPD": true, "XPT": true, // precious metals
	"XBA": true, "XBB": true, "XBC": true, "XBD": true, // bond-market units
	"XDR": true, "XSU": true, "XUA": true, "XEU": true, // units of account
	"XFO": true, "XFU": true, "XRE": true, // CLDR's historic units, not ISO 4217
	"XTS": true, // reserved for testing
	"XXX": true, // no currency
}

// addedSinceCLDR32 are the ISO 4217 codes published after the CLDR release
// golang.org/x/text/currency is built from, with their minor unit.
var addedSinceCLDR32 = map[string]int{
	"MRU": 2, // Mauritanian ouguiya, 2018
	"VES": 2, // Venezuelan bolívar soberano, 2018
	"UYW": 4, // Uruguayan unidad previsional, 2018
	"VED": 2, // Venezuelan bolívar digital, 2021
	"SLE": 2, // Sierra Leonean leone, 2022
	"ZWG": 2, // Zimbabwe gold, 2024
	"XCG": 2, // Caribbean guilder, 2025
}

// cldrBelowISO are the current ISO 4217 codes whose minor unit is more than
// CLDR 32's standard digits (0 for all of them), with ISO's minor unit; and
// MRO and STD, replaced in 2018 (by MRU and STN), whose minor unit was 2.
var cldrBelowISO = map[string]int{
	"AFN": 2, "ALL": 2, "AMD": 2, "COP": 2, "GYD": 2, "IDR": 2, "IQD": 3, "IRR": 2,
	"KPW": 2, "LAK": 2, "LBP": 2, "MGA": 2, "MMK": 2, "MNT": 2, "MUR": 2, "PKR": 2,
	"RSD": 2, "SLL": 2, "SOS": 2, "SYP": 2, "TZS": 2, "UZS": 2, "YER": 2,
	"MRO": 2, "STD": 2,
}

// ValidateCurrency reports whether code is a currency a branch may keep
// its books in (see above); the error says why not.
func ValidateCurrency(code string) error {
	if len(code) != 3 || strings.Trim(code, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
		if up := strings.ToUpper(code); up != code && len(up) == 3 && strings.Trim(up, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == "" {
			return fmt.Errorf("%q: currency codes are upper case (%s)", code, up)
		}
		return fmt.Errorf("%q is not an ISO 4217 alphabetic code (three upper-case letters, e.g. BRL)", truncateRunes(code, 16))
	}
	if _, ok := addedSinceCLDR32[code]; ok {
		return nil
	}
	if notMoney[code] {
		return fmt.Errorf("%s is an ISO 4217 code but not a currency amounts can be in", code)
	}
	if _, err := currency.ParseISO(code); err != nil {
		return fmt.Errorf("%s is not an ISO 4217 currency code", code)
	}
	return nil
}

// CurrencyDigits returns the fraction digits of a valid currency code
// (ValidateCurrency): its ISO 4217 minor unit, from the tables above or
// else CLDR's standard digits.
func CurrencyDigits(code string) int {
	if n, ok := addedSinceCLDR32[code]; ok {
		return n
	}
	if n, ok := cldrBelowISO[code]; ok {
		return n
	}
	u, err := currency.ParseISO(code)
	if err != nil {
		return MaxAmountFractionDigits
	}
	scale, _ := currency.Standard.Rounding(u)
	return scale
}

// CheckAmountDigits reports whether amount d can be an amount in the valid
// currency code: at most CurrencyDigits(code) fraction digits once its
// trailing zeros are dropped ("10.0" is 10 yen, "10.5" is not an amount in
// yen).
func CheckAmountDigits(d decimal.Decimal, code string) error {
	_, frac, _ := strings.Cut(FormatAmount(d), ".")
	if n := CurrencyDigits(code); len(frac) > n {
		return fmt.Errorf("%s has %d fraction digits; amounts in %s have at most %d", FormatAmount(d), len(frac), code, n)
	}
	return nil
}
