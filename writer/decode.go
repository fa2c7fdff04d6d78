package writer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/shopspring/decimal"

	"github.com/ledger-dev/ledger/aggregates"
)

// MaxDescriptionLength bounds a transaction's description, in characters.
const MaxDescriptionLength = 500

// maxAmountText bounds the text of an amount before it is parsed, so no
// input can make the decimal parser or formatter do unbounded work.
const maxAmountText = 64

// Body fields of a transaction (POST and PATCH bodies, and the responses).
const (
	fieldType          = "type"
	fieldAmount        = "amount"
	fieldCategory      = "category"
	fieldCostCenter    = "costCenter"
	fieldPaymentMethod = "paymentMethod"
	fieldDescription   = "description"
	fieldCreatedAt     = "createdAt"
)

var (
	createFields = map[string]bool{fieldType: true, fieldAmount: true, fieldCategory: true, fieldCostCenter: true,
		fieldPaymentMethod: true, fieldDescription: true, fieldCreatedAt: true}
	patchFields = map[string]bool{fieldType: true, fieldAmount: true, fieldCategory: true, fieldCostCenter: true,
		fieldPaymentMethod: true, fieldDescription: true}
)

// createRequest is a validated POST body.
type createRequest struct {
	Type                                   aggregates.Type
	Amount                                 decimal.Decimal
	Category                               string
	CostCenter, PaymentMethod, Description string    // "" when absent
	CreatedAt                              time.Time // zero when absent (the server's clock then)
}

// optional is a PATCH field that may be set to a value or removed (null).
type optional struct {
	Set   bool   // the field is in the patch
	Value string // "" removes it
}

// patchRequest is a validated PATCH body (JSON merge patch, RFC 7396): a
// field that is present replaces the stored one; null removes an optional
// field. createdAt cannot change: it is encoded in the id.
type patchRequest struct {
	Type                                   *aggregates.Type
	Amount                                 *decimal.Decimal
	Category                               *string
	CostCenter, PaymentMethod, Description optional
}

func (p patchRequest) empty() bool {
	return p.Type == nil && p.Amount == nil && p.Category == nil && !p.CostCenter.Set && !p.PaymentMethod.Set && !p.Description.Set
}

// readBody reads at most limit bytes of the request body. A larger body is a
// 413 problem.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *Problem) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, problem(http.StatusRequestEntityTooLarge, ProblemBodyTooLarge, fmt.Sprintf("the body is larger than %d bytes", limit))
	case err != nil:
		return nil, problem(http.StatusBadRequest, ProblemInvalidJSON, "the body could not be read")
	}
	return body, nil
}

// decodeObject splits a JSON body into its top-level members. The body must
// be valid UTF-8 holding exactly one JSON object whose member names are all
// in allowed (matched exactly, unlike encoding/json's case-insensitive
// matching) and appear once. Values stay raw, numbers untouched.
func decodeObject(body []byte, allowed map[string]bool) (map[string]json.RawMessage, *Problem) {
	invalid := func(detail string) (map[string]json.RawMessage, *Problem) {
		return nil, problem(http.StatusBadRequest, ProblemInvalidJSON, detail)
	}
	if !utf8.Valid(body) {
		return invalid("the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return invalid("the body is not JSON: " + jsonError(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return invalid("the body must be a JSON object")
	}
	members := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return invalid("the body is not JSON: " + jsonError(err))
		}
		name, ok := tok.(string)
		if !ok {
			return invalid("the body is not JSON: expected a member name")
		}
		if !allowed[name] {
			p := problem(http.StatusBadRequest, ProblemUnknownField, fmt.Sprintf("unknown field %q", truncate(name, 64)))
			p.Field = truncate(name, 64)
			return nil, p
		}
		if _, dup := members[name]; dup {
			p := problem(http.StatusBadRequest, ProblemInvalidJSON, fmt.Sprintf("field %q appears more than once", name))
			p.Field = name
			return nil, p
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return invalid("the body is not JSON: " + jsonError(err))
		}
		members[name] = raw
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return invalid("the body is not JSON: " + jsonError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("the body must hold one JSON object and nothing after it")
	}
	return members, nil
}

func jsonError(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input"
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Sprintf("%s at offset %d", syn.Error(), syn.Offset)
	}
	return err.Error()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// decodeCreate decodes and validates a POST body.
func decodeCreate(body []byte) (createRequest, *Problem) {
	m, p := decodeObject(body, createFields)
	if p != nil {
		return createRequest{}, p
	}
	var req createRequest
	for _, f := range []string{fieldType, fieldAmount, fieldCategory} {
		if raw, ok := m[f]; !ok || isNull(raw) {
			return createRequest{}, fieldProblem(f, "required")
		}
	}
	if req.Type, p = parseType(m[fieldType]); p != nil {
		return createRequest{}, p
	}
	if req.Amount, p = parseAmount(m[fieldAmount]); p != nil {
		return createRequest{}, p
	}
	if req.Category, p = parseName(fieldCategory, m[fieldCategory]); p != nil {
		return createRequest{}, p
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{fieldCostCenter, &req.CostCenter}, {fieldPaymentMethod, &req.PaymentMethod}} {
		if raw, ok := m[f.name]; ok && !isNull(raw) {
			if *f.dst, p = parseName(f.name, raw); p != nil {
				return createRequest{}, p
			}
		}
	}
	if raw, ok := m[fieldDescription]; ok && !isNull(raw) {
		if req.Description, p = parseDescription(raw); p != nil {
			return createRequest{}, p
		}
	}
	if raw, ok := m[fieldCreatedAt]; ok && !isNull(raw) {
		if req.CreatedAt, p = parseCreatedAt(raw); p != nil {
			return createRequest{}, p
		}
	}
	return req, nil
}

// decodePatch decodes and validates a PATCH body.
func decodePatch(body []byte) (patchRequest, *Problem) {
	m, p := decodeObject(body, patchFields)
	if p != nil {
		if p.Type == ProblemUnknownField && p.Field == fieldCreatedAt {
			p.Detail = "createdAt cannot change: it is encoded in the transaction's id (delete and create instead)"
		}
		return patchRequest{}, p
	}
	var req patchRequest
	for _, f := range []string{fieldType, fieldAmount, fieldCategory} {
		if raw, ok := m[f]; ok && isNull(raw) {
			return patchRequest{}, fieldProblem(f, "required: it cannot be removed")
		}
	}
	if raw, ok := m[fieldType]; ok {
		t, p := parseType(raw)
		if p != nil {
			return patchRequest{}, p
		}
		req.Type = &t
	}
	if raw, ok := m[fieldAmount]; ok {
		a, p := parseAmount(raw)
		if p != nil {
			return patchRequest{}, p
		}
		req.Amount = &a
	}
	if raw, ok := m[fieldCategory]; ok {
		c, p := parseName(fieldCategory, raw)
		if p != nil {
			return patchRequest{}, p
		}
		req.Category = &c
	}
	for _, f := range []struct {
		name string
		dst  *optional
	}{{fieldCostCenter, &req.CostCenter}, {fieldPaymentMethod, &req.PaymentMethod}, {fieldDescription, &req.Description}} {
		raw, ok := m[f.name]
		if !ok {
			continue
		}
		f.dst.Set = true
		if isNull(raw) {
			continue
		}
		var p *Problem
		if f.name == fieldDescription {
			f.dst.Value, p = parseDescription(raw)
		} else {
			f.dst.Value, p = parseName(f.name, raw)
		}
		if p != nil {
			return patchRequest{}, p
		}
	}
	if req.empty() {
		return patchRequest{}, problem(http.StatusBadRequest, ProblemInvalidJSON, "the patch changes nothing: name at least one field")
	}
	return req, nil
}

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

func parseString(field string, raw json.RawMessage) (string, *Problem) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", fieldProblem(field, "must be a string")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fieldProblem(field, "must be a string")
	}
	return s, nil
}

func parseType(raw json.RawMessage) (aggregates.Type, *Problem) {
	s, p := parseString(fieldType, raw)
	if p != nil {
		return "", p
	}
	switch t := aggregates.Type(s); t {
	case aggregates.Income, aggregates.Expense:
		return t, nil
	}
	return "", fieldProblem(fieldType, fmt.Sprintf("%q: want INCOME or EXPENSE", truncate(s, 32)))
}

func parseDescription(raw json.RawMessage) (string, *Problem) {
	s, p := parseString(fieldDescription, raw)
	if p != nil {
		return "", p
	}
	if n := utf8.RuneCountInString(s); n > MaxDescriptionLength {
		return "", fieldProblem(fieldDescription, fmt.Sprintf("%d characters, more than %d", n, MaxDescriptionLength))
	}
	for i, r := range s {
		if r != '\n' && r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r)) {
			return "", fieldProblem(fieldDescription, fmt.Sprintf("character %U at %d not allowed", r, i))
		}
	}
	return s, nil
}

// amountSyntax is a plain decimal: no sign but '-', no leading zeros, no
// spaces, an exponent of at most 3 digits. JSON numbers always have this
// shape except for exponent length; strings must have it too.
var amountSyntax = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]{1,3})?$`)

// parseAmount reads an amount given as a JSON number or a decimal string,
// exactly (never through float64): it must be greater than 0, with at most
// 22 integer and 8 fraction digits (aggregates.CheckAmountRange).
func parseAmount(raw json.RawMessage) (decimal.Decimal, *Problem) {
	var s string
	switch {
	case len(raw) > 0 && raw[0] == '"':
		var p *Problem
		if s, p = parseString(fieldAmount, raw); p != nil {
			return decimal.Decimal{}, p
		}
	case len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'):
		s = string(raw)
	default:
		return decimal.Decimal{}, fieldProblem(fieldAmount, "must be a decimal number or a string holding one, e.g. \"12.50\"")
	}
	if len(s) > maxAmountText || !amountSyntax.MatchString(s) {
		return decimal.Decimal{}, fieldProblem(fieldAmount, fmt.Sprintf("%q is not a decimal number such as 12.50", truncate(s, maxAmountText)))
	}
	d, err := aggregates.ParseAmount(s)
	if err != nil {
		return decimal.Decimal{}, fieldProblem(fieldAmount, err.Error())
	}
	if !d.IsPositive() {
		return decimal.Decimal{}, fieldProblem(fieldAmount, "must be greater than 0")
	}
	if err := aggregates.CheckAmountRange(d); err != nil {
		return decimal.Decimal{}, fieldProblem(fieldAmount, err.Error())
	}
	return d, nil
}

// Bounds of createdAt: ULIDs encode milliseconds since 1970, and RFC 3339
// years have four digits.
var (
	minCreatedAt = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	maxCreatedAt = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

func parseCreatedAt(raw json.RawMessage) (time.Time, *Problem) {
	s, p := parseString(fieldCreatedAt, raw)
	if p != nil {
		return time.Time{}, p
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fieldProblem(fieldCreatedAt, fmt.Sprintf("%q is not an RFC 3339 time such as 2026-01-31T12:00:00Z", truncate(s, 64)))
	}
	if p := checkOffset(s); p != nil {
		return time.Time{}, p
	}
	t = t.UTC()
	if t.Before(minCreatedAt) || t.After(maxCreatedAt) {
		return time.Time{}, fieldProblem(fieldCreatedAt, "must be between 1970-01-01 and 9999-12-31 (UTC)")
	}
	return t, nil
}

// checkOffset refuses what time.Parse lets through but RFC 3339 does not:
// a numeric offset whose hour is over 23 or whose minute is over 59
// ("+24:00" would store the time on the previous day, "+01:60" is
// "+02:00" in disguise). s has already parsed as RFC 3339.
func checkOffset(s string) *Problem {
	if len(s) < 6 || s[len(s)-1] == 'Z' || s[len(s)-1] == 'z' {
		return nil
	}
	off := s[len(s)-6:]
	hh, mm := off[1:3], off[4:6]
	if (off[0] != '+' && off[0] != '-') || off[3] != ':' || hh > "23" || mm > "59" {
		return fieldProblem(fieldCreatedAt, fmt.Sprintf("offset %q out of range: RFC 3339 offsets run from -23:59 to +23:59", off))
	}
	return nil
}
