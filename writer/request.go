package writer

import (
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// Checks every mutating request shares after its path: If-Match, the
// Idempotency-Key, the content type and the body.

// requireIfMatch reads the If-Match a PATCH must carry: 428 without it, 400
// for "*".
func requireIfMatch(r *http.Request) (int64, *Problem) {
	expected, present, wildcard, p := parseIfMatch(r)
	switch {
	case p != nil:
		return 0, p
	case !present:
		p = problem(http.StatusPreconditionRequired, ProblemPreconditionRequired, `this change needs If-Match with the version to change, as the ETag gives it: If-Match: "3"`)
		p.Field = "If-Match"
		return 0, p
	case wildcard:
		return 0, fieldProblem("If-Match", `give a version, not "*"`)
	}
	return expected, nil
}

// mutationRequest runs the checks every mutating request with a body shares
// and returns its Idempotency-Key and body: the key (required when
// keyRequired), the content type and the body. On a problem it has
// answered and ok is false.
func (s *Server) mutationRequest(w http.ResponseWriter, r *http.Request, keyRequired bool, what string) (key string, body []byte, ok bool) {
	key, p := parseIdempotencyKey(r)
	if p == nil && key == "" && keyRequired {
		p = problem(http.StatusBadRequest, ProblemIdempotencyKeyRequired, "creating "+what+" needs an Idempotency-Key header (a fresh UUID per request, reused on retries)")
		p.Field = "Idempotency-Key"
	}
	if p == nil {
		p = requireJSON(r, r.Method == http.MethodPatch)
	}
	if p == nil {
		body, p = readBody(w, r, s.cfg.MaxBodyBytes)
	}
	if p != nil {
		p.write(w)
		return "", nil, false
	}
	return key, body, true
}

// patchRequest runs the checks a PATCH of a directory item shares after its
// path: If-Match (required, requireIfMatch), then mutationRequest's. On a
// problem it has answered and ok is false.
func (s *Server) patchRequest(w http.ResponseWriter, r *http.Request) (expected int64, key string, body []byte, ok bool) {
	expected, p := requireIfMatch(r)
	if p != nil {
		p.write(w)
		return 0, "", nil, false
	}
	key, body, ok = s.mutationRequest(w, r, false, "")
	return expected, key, body, ok
}

// deleteRequest runs the checks a DELETE shares after its path: If-Match
// (optional: expected is 0 without it or for "*", any version) and the
// Idempotency-Key. On a problem it has answered and ok is false.
func (s *Server) deleteRequest(w http.ResponseWriter, r *http.Request) (expected int64, key string, ok bool) {
	expected, _, _, p := parseIfMatch(r)
	if p == nil {
		key, p = parseIdempotencyKey(r)
	}
	if p != nil {
		p.write(w)
		return 0, "", false
	}
	return expected, key, true
}

// decodePatchFields decodes the body of a PATCH that sets fields: an object
// of some of them (decodeObject), none null (they cannot be removed), at
// least one.
func decodePatchFields(body []byte, fields ...string) (map[string]json.RawMessage, *Problem) {
	allowed := make(map[string]bool, len(fields))
	for _, f := range fields {
		allowed[f] = true
	}
	m, p := decodeObject(body, allowed)
	if p == nil {
		p = notNull(m, fields...)
	}
	if p == nil && len(m) == 0 {
		p = problem(http.StatusBadRequest, ProblemInvalidJSON, "the patch changes nothing: name at least one field")
	}
	return m, p
}

// requireJSON checks the request's Content-Type: application/json, or also
// application/merge-patch+json when merge is true; charset, if given, must
// be UTF-8.
func requireJSON(r *http.Request, merge bool) *Problem {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	ok := err == nil && (mt == "application/json" || merge && mt == "application/merge-patch+json")
	if cs, has := params["charset"]; ok && has && !strings.EqualFold(cs, "utf-8") {
		ok = false
	}
	if !ok {
		want := "application/json"
		if merge {
			want += " or application/merge-patch+json"
		}
		p := problem(http.StatusUnsupportedMediaType, ProblemUnsupportedMediaType, "Content-Type must be "+want)
		p.Field = "Content-Type"
		return p
	}
	return nil
}

// singleParams checks that q has only allowed parameters, each once.
func singleParams(q url.Values, allowed map[string]bool) *Problem {
	for name, vs := range q {
		if !allowed[name] {
			return fieldProblem(truncate(name, 64), "unknown query parameter")
		}
		if len(vs) > 1 {
			return fieldProblem(name, "give it once")
		}
	}
	return nil
}
