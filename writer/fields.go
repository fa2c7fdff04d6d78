package writer

import (
	"encoding/json"
	"net/http"

	"github.com/ledger-dev/ledger/aggregates"
)

// Parsers of the body fields of directory requests (tenants, branches,
// accounts): each validates and normalises one field or answers the 400
// naming it, and the 403s of values a token does not prove.

func parseIDField(field string, raw json.RawMessage) (string, *Problem) {
	v, p := parseString(field, raw)
	if p != nil {
		return "", p
	}
	if err := aggregates.ValidateID(v); err != nil {
		return "", fieldProblem(field, err.Error())
	}
	return v, nil
}

func parseDisplayName(field string, raw json.RawMessage) (string, *Problem) {
	v, p := parseString(field, raw)
	if p != nil {
		return "", p
	}
	if err := aggregates.ValidateDisplayName(v); err != nil {
		return "", fieldProblem(field, err.Error())
	}
	return v, nil
}

func parseChecked(field string, raw json.RawMessage, check func(string) error) (string, *Problem) {
	v, p := parseString(field, raw)
	if p != nil {
		return "", p
	}
	if err := check(v); err != nil {
		return "", fieldProblem(field, err.Error())
	}
	return v, nil
}

func parseEmail(field string, raw json.RawMessage) (string, *Problem) {
	v, p := parseString(field, raw)
	if p != nil {
		return "", p
	}
	return checkEmail(field, v)
}

func checkEmail(field, v string) (string, *Problem) {
	c, err := aggregates.CanonicalEmail(v)
	if err != nil {
		return "", fieldProblem(field, err.Error())
	}
	return c, nil
}

func parseDocument(field string, raw json.RawMessage) (string, *Problem) {
	v, p := parseString(field, raw)
	if p != nil {
		return "", p
	}
	return checkDocument(field, v)
}

func checkDocument(field, v string) (string, *Problem) {
	c, err := aggregates.CanonicalDocument(v)
	if err != nil {
		return "", fieldProblem(field, err.Error())
	}
	return c, nil
}

func parseBool(field string, raw json.RawMessage) (bool, *Problem) {
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fieldProblem(field, "must be true or false")
}

// required checks that the members named are present and not null.
func required(m map[string]json.RawMessage, fields ...string) *Problem {
	for _, f := range fields {
		if raw, ok := m[f]; !ok || isNull(raw) {
			return fieldProblem(f, "required")
		}
	}
	return nil
}

// notNull refuses null for the members named (they cannot be removed).
func notNull(m map[string]json.RawMessage, fields ...string) *Problem {
	for _, f := range fields {
		if raw, ok := m[f]; ok && isNull(raw) {
			return fieldProblem(f, "cannot be removed (null)")
		}
	}
	return nil
}

// emailNotProven is the 403 of a request that would mark address verified
// with a token that does not prove it (Claims.ProvesEmail).
func emailNotProven(field, address string) *Problem {
	p := problem(http.StatusForbidden, ProblemEmailNotProven, "the token does not prove the address "+address+
		": only an admin-scoped token, or one whose email claim is this address with email_verified true, may mark it verified; add it unverified instead")
	p.Field = field
	return p
}

// documentNotProven is the 403 of a request that would claim document with
// a token that does not prove it (Claims.ProvesDocument).
func documentNotProven(document string) *Problem {
	p := problem(http.StatusForbidden, ProblemDocumentNotProven, "the token does not prove the document number "+document+
		": only an admin-scoped token, or one whose documents claim holds it, may claim it for a branch")
	p.Field = "document"
	return p
}
