package writer

import (
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// Checks every mutating request shares after its path: If-Match, the
// Idempotency-Key, the content type and the body.

// ifMatchWording is how a request that must carry If-Match words its
// 428 and the 400 of "*".
type ifMatchWording struct{ missing, wildcard string }

var (
	changeIfMatch = ifMatchWording{
		missing:  `this change needs If-Match with the version to change, as the ETag gives it: If-Match: "3"`,
		wildcard: `give a version, not "*"`,
	}
	patchIfMatch = ifMatchWording{
		missing:  `PATCH needs If-Match with the version to change, as the ETag gives it: If-Match: "3"`,
		wildcard: `PATCH needs a version, not "*"`,
	}
)

// requireIfMatch reads the If-Match a PATCH must carry: 428 without it, 400
// for "*", worded as wording says.
func requireIfMatch(r *http.Request, wording ifMatchWording) (int64, *Problem) {
	expected, present, wildcard, p := parseIfMatch(r)
	switch {
	case p != nil:
		return 0, p
	case !present:
		p = problem(http.StatusPreconditionRequired, ProblemPreconditionRequired, wording.missing)
		p.Field = "If-Match"
		return 0, p
	case wildcard:
		return 0, fieldProblem("If-Match", wording.wildcard)
	}
	return expected, nil
}

// mutationRequest runs the checks every mutating request with a body shares
// and returns its Idempotency-Key and body: first the problem its path or
// headers already have (p, nil when none), then the key (required when
// keyMissing, the detail of the 400 without it, is not ""), the content
// type and the body. On a problem it has answered and ok is false.
func (s *Server) mutationRequest(w http.ResponseWriter, r *http.Request, p *Problem, keyMissing string) (key string, body []byte, ok bool) {
	if p == nil {
		key, p = parseIdempotencyKey(r)
	}
	if p == nil && key == "" && keyMissing != "" {
		p = problem(http.StatusBadRequest, ProblemIdempotencyKeyRequired, keyMissing)
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

// keyRequiredToCreate is the detail of the 400 of a create of what
// without an Idempotency-Key.
func keyRequiredToCreate(what string) string {
	return "creating " + what + " needs an Idempotency-Key header (a fresh UUID per request, reused on retries)"
}

// patchRequest runs the checks a PATCH shares: its path's (pathProblem,
// nil when the path is valid), If-Match (required, requireIfMatch), then
// mutationRequest's. On a problem it has answered and ok is false.
func (s *Server) patchRequest(w http.ResponseWriter, r *http.Request, pathProblem *Problem, wording ifMatchWording) (expected int64, key string, body []byte, ok bool) {
	p := pathProblem
	if p == nil {
		expected, p = requireIfMatch(r, wording)
	}
	key, body, ok = s.mutationRequest(w, r, p, "")
	return expected, key, body, ok
}

// deleteRequest runs the checks a DELETE shares: its path's (pathProblem,
// nil when the path is valid), If-Match (optional: expected is 0 without it
// or for "*", any version) and the Idempotency-Key. On a problem it has
// answered and ok is false.
func (s *Server) deleteRequest(w http.ResponseWriter, r *http.Request, pathProblem *Problem) (expected int64, key string, ok bool) {
	p := pathProblem
	if p == nil {
		expected, _, _, p = parseIfMatch(r)
	}
	if p == nil {
		key, p = parseIdempotencyKey(r)
	}
	if p != nil {
		p.write(w)
		return 0, "", false
	}
	return expected, key, true
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
