package writer

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/ledger-dev/ledger/aggregates"
)

// A branch's currency (issue 24).
//
// A branch may have a currency, an ISO 4217 code (aggregates/currency.go
// says which codes): every amount of its transactions is in it, and the
// writer stamps it on each transaction item it writes (attribute currency,
// table/transaction.go), taken from the directory cache like the calendar,
// so that a consumer knows an amount's currency without reading the
// branch. A branch without one keeps the behaviour of before: its
// transactions carry no currency and any amount of up to 8 fraction digits.
//
// The currency is set at creation or by a PATCH, and only while the branch
// has never had a transaction: its hasTransactions marker, set by the
// first create in the same TransactWriteItems as the transaction
// (branchMark) and never removed, is what "has transactions" means, as for
// a delete. Two writes can race:
//
//   - a PATCH of the currency against the first create. The PATCH is an
//     UpdateItem on condition attribute_not_exists(hasTransactions) (and
//     the version): once a create has committed the marker, the PATCH is
//     refused (409 branch-has-transactions, field currency), whatever it
//     read before.
//   - the first create against a PATCH of the currency. The create read the
//     branch (a branch without the marker is never cached: dircache.go), so
//     it validated and stamped the amount in the currency then stored; its
//     marker Update is conditional on the branch still having that
//     currency (or none, if it had none). A PATCH committed in between fails
//     the create's condition, and the create prepares again from a fresh
//     read: it is validated and stamped in the new currency, or refused.
//
// Either way no transaction of a branch is in another currency than the
// branch's, and once the marker is set the currency never changes, so a
// cached currency of a marked branch is never stale. The marker stays when
// every transaction is deleted: the currency of a branch that ever had one
// stays. Setting the currency the branch already has is a no-op the PATCH
// allows at any time. A currency cannot be removed (null is 400, as for
// every branch field).

// errCurrencyDamaged marks the error of a branch whose stored currency is
// not a valid code (damaged by hand): its transactions' creates and changes
// fail (500, logged) rather than be stamped with it or checked against it.
var errCurrencyDamaged = errors.New("stored currency damaged: transactions of this branch are refused until it is mended (a PATCH of the currency while the branch has no transactions; else by hand, to the code its transactions carry)")

// parseCurrency reads a currency code member: a JSON string (else 400
// invalid-field), a code aggregates.ValidateCurrency accepts (else 422
// invalid-field). Lower-case codes are refused, not normalised.
func parseCurrency(field string, raw json.RawMessage) (string, *Problem) {
	v, p := parseString(field, raw)
	if p != nil {
		return "", p
	}
	if err := aggregates.ValidateCurrency(v); err != nil {
		return "", unacceptableField(field, err.Error())
	}
	return v, nil
}

// unacceptableField is the 422 invalid-field of a well-formed value that is
// not acceptable: an unknown currency code, an amount with more fraction
// digits than its currency has.
func unacceptableField(field, detail string) *Problem {
	p := fieldProblem(field, detail)
	p.Status = http.StatusUnprocessableEntity
	return p
}

// checkAmountCurrency is the 422 naming amount of an amount with more
// fraction digits than currency (a valid code, or "" for none: any amount)
// has; nil when it fits or is not a number (transactionItem names that).
func checkAmountCurrency(amount, currency string) *Problem {
	if currency == "" {
		return nil
	}
	d, err := aggregates.ParseAmount(amount)
	if err != nil {
		return nil
	}
	if err := aggregates.CheckAmountDigits(d, currency); err != nil {
		return unacceptableField("amount", err.Error())
	}
	return nil
}

// currencyFrozen is the 409 of changing the currency of a branch that has
// had transactions.
func currencyFrozen(branch, currency string) *Problem {
	detail := "branch " + branch + " has transactions: its currency cannot change"
	if currency != "" {
		detail += " (it is " + currency + ")"
	} else {
		detail += " (it has none; its transactions' amounts are in no declared currency)"
	}
	p := problem(http.StatusConflict, ProblemBranchHasTransactions, detail)
	p.Field = "currency"
	return p
}
