package writer

import (
	"encoding/json"
	"net/http"

	"github.com/ledger-dev/ledger/aggregates"
)

// Parsers of the body fields of directory requests (tenants, branches,
// accounts): each validates and normalises one field or answers the 400
// naming it, and the 403s of values a token does not prove.

// fieldParser reads one string field of a body, validated and normalised,
// or answers the 400 naming it.
type fieldParser func(field string, raw json.RawMessage) (string, *Problem)

// checked is the parser of a string that check validates.
func checked(check func(string) error) fieldParser {
	return parsed(func(field, v string) (string, *Problem) {
		if err := check(v); err != nil {
			return "", fieldProblem(field, err.Error())
		}
		return v, nil
	})
}

// normalised is the check of a value that canon validates and normalises.
func normalised(canon func(string) (string, error)) func(field, v string) (string, *Problem) {
	return func(field, v string) (string, *Problem) {
		c, err := canon(v)
		if err != nil {
			return "", fieldProblem(field, err.Error())
		}
		return c, nil
	}
}

// parsed is the parser of a string field that check validates (and may
// normalise).
func parsed(check func(field, v string) (string, *Problem)) fieldParser {
	return func(field string, raw json.RawMessage) (string, *Problem) {
		v, p := parseString(field, raw)
		if p != nil {
			return "", p
		}
		return check(field, v)
	}
}

var (
	parseIDField     = checked(aggregates.ValidateID)
	parseDisplayName = checked(aggregates.ValidateDisplayName)
	parseName        = checked(aggregates.ValidateName)
	checkEmail       = normalised(aggregates.CanonicalEmail)
	checkDocument    = normalised(aggregates.CanonicalDocument)
	parseEmail       = parsed(checkEmail)
	parseDocument    = parsed(checkDocument)
)

// bodyField is a string field of a request body: its name, whether it is
// required, its parser and where its value goes (no parser: the caller
// reads it from the object itself).
type bodyField struct {
	name     string
	required bool
	parse    fieldParser
	dst      *string
}

// decodeFields decodes body, an object of fields only (decodeObject), the
// required ones present and not null, and parses each field given into its
// destination, in order: an optional field absent or null leaves it as it
// is. It returns the object.
func decodeFields(body []byte, fields ...bodyField) (map[string]json.RawMessage, *Problem) {
	return decodeBody(body, fields, func(m map[string]json.RawMessage) *Problem {
		var names []string
		for _, f := range fields {
			if f.required {
				names = append(names, f.name)
			}
		}
		return required(m, names...)
	})
}

// decodePatchFields decodes the body of a PATCH that sets fields: an object
// of some of them (decodeObject), none null (they cannot be removed), at
// least one, each parsed, in order, into its destination ("" where
// absent).
func decodePatchFields(body []byte, fields ...bodyField) *Problem {
	_, p := decodeBody(body, fields, func(m map[string]json.RawMessage) *Problem {
		for _, f := range fields {
			if p := notNull(m, f.name); p != nil {
				return p
			}
		}
		if len(m) == 0 {
			return problem(http.StatusBadRequest, ProblemInvalidJSON, "the patch changes nothing: name at least one field")
		}
		return nil
	})
	return p
}

// decodeBody decodes body, an object of fields only, checks it with check
// and parses the fields present and not null, in order.
func decodeBody(body []byte, fields []bodyField, check func(map[string]json.RawMessage) *Problem) (map[string]json.RawMessage, *Problem) {
	allowed := make(map[string]bool, len(fields))
	for _, f := range fields {
		allowed[f.name] = true
	}
	m, p := decodeObject(body, allowed)
	if p == nil {
		p = check(m)
	}
	for _, f := range fields {
		if raw, ok := m[f.name]; p == nil && ok && !isNull(raw) && f.parse != nil {
			*f.dst, p = f.parse(f.name, raw)
		}
	}
	return m, p
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
func emailNotProven(field, address string, folded bool) *Problem {
	detail := "the token does not prove the address " + address +
		": only an admin-scoped token, or one whose email claim is this address with email_verified true, may mark it verified; add it unverified instead"
	if folded {
		detail = "the token's email claim is the address " + address + " only after Unicode case folding or normalisation (ß is ss, the Kelvin sign K is k, " +
			"full-width letters are ASCII), which does not prove it: the claim must spell the stored form " + address +
			" (ASCII letters in either case, the domain in any IDNA form); an admin-scoped token can verify it, or add it unverified"
	}
	p := problem(http.StatusForbidden, ProblemEmailNotProven, detail)
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
