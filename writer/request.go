package writer

import (
	"context"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// Checks every mutating request shares after its path: If-Match, the
// Idempotency-Key, the content type and the body.

// ifMatchMissing is the detail of the 428 of a change without If-Match.
type ifMatchMissing string

const (
	changeIfMatch ifMatchMissing = `this change needs If-Match with the version to change, as the ETag gives it: If-Match: "3"`
	patchIfMatch  ifMatchMissing = `PATCH needs If-Match with the version to change, as the ETag gives it: If-Match: "3"`
)

// ifMatch is a request's If-Match (RFC 9110 §13.1.1), evaluated against the
// item's version once the item is read (versionFor). The writer's entity
// tags are strong, its versions quoted ("3"); If-Match compares strongly,
// so a weak tag (W/"3") never matches, nor does a strong tag that is no
// version ("abc", "0"): both are 412, not 400. A bare number (3) is taken
// as "3", as before RFC 9110 semantics; anything else that is not an
// entity tag is 400.
type ifMatch struct {
	present  bool
	any      bool    // "*": any current version
	versions []int64 // the versions the strong tags name
}

// parseIfMatch reads If-Match (every field line of it, as one list).
func parseIfMatch(r *http.Request) (ifMatch, *Problem) {
	values := r.Header.Values("If-Match")
	if len(values) == 0 {
		return ifMatch{}, nil
	}
	bad := func(detail string) (ifMatch, *Problem) {
		return ifMatch{}, fieldProblem("If-Match", detail)
	}
	m := ifMatch{present: true}
	v := strings.Join(values, ",")
	if strings.TrimSpace(v) == "*" {
		m.any = true
		return m, nil
	}
	elements := 0
	for rest := v; ; {
		rest = strings.TrimLeft(rest, " \t,")
		if rest == "" {
			break
		}
		elements++
		weak := strings.HasPrefix(rest, "W/")
		if weak {
			rest = rest[2:]
		}
		var tag string
		switch {
		case strings.HasPrefix(rest, `"`):
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				return bad(`an entity tag is not closed: give versions as the ETag gives them, "3", or a list "2", "3"`)
			}
			tag, rest = rest[1:1+end], rest[2+end:]
			for i := 0; i < len(tag); i++ {
				if c := tag[i]; c < 0x21 || c == 0x7f { // etagc: no controls or spaces (RFC 9110 §8.8.3)
					return bad("an entity tag has a character entity tags cannot hold")
				}
			}
		case weak:
			return bad(`W/ must be followed by a quoted tag`)
		default: // a bare version, as clients sent before: 3
			end := strings.IndexAny(rest, " \t,")
			if end < 0 {
				end = len(rest)
			}
			tag, rest = rest[:end], rest[end:]
			if n, err := strconv.ParseInt(tag, 10, 64); err != nil || n < 1 || tag[0] == '+' {
				return bad(`must be "*" or entity tags as the ETag gives them: "3", or a list "2", "3"`)
			}
		}
		if rest != "" && !strings.ContainsRune(" \t,", rune(rest[0])) {
			return bad(`separate entity tags with commas: "2", "3"`)
		}
		if weak {
			continue // never matches under the strong comparison
		}
		if n, err := strconv.ParseInt(tag, 10, 64); err == nil && n >= 1 && tag[0] != '+' {
			m.versions = append(m.versions, n)
		}
	}
	if elements == 0 {
		return bad(`must be "*" or entity tags as the ETag gives them: "3"`)
	}
	return m, nil
}

// versionFor evaluates m against the item's current version: the version
// the change's write is then conditioned on — 0 (any version, as without
// If-Match) when m is absent or "*", current when a listed version is
// current — or the 412 when none is. An item that does not exist is the
// handler's 404 before this (RFC 9110 §13.2.1: a response that would not
// be 2xx without the precondition takes precedence over it).
func (s *Server) versionFor(m ifMatch, current int64) (int64, *Problem) {
	switch {
	case !m.present || m.any:
		return 0, nil
	case slices.Contains(m.versions, current):
		return current, nil
	}
	return 0, s.versionConflict(current)
}

// readForPatch reads the item at k a PATCH changes (what it is, for the
// 404) and evaluates m against it: the item and the version the write is
// conditioned on, the version read (whichever tag matched, or "*"), or
// the 404 or the 412.
func (s *Server) readForPatch(ctx context.Context, k aggregates.Key, m ifMatch, what string) (map[string]ddbtypes.AttributeValue, int64, *Problem, error) {
	item, p, err := s.getForChange(ctx, k, 0, what)
	if item == nil {
		return nil, 0, p, err
	}
	read, _ := intAttr(item, attrVersion)
	if _, p := s.versionFor(m, read); p != nil {
		return nil, 0, p, nil
	}
	return item, read, nil, nil
}

// requireIfMatch reads the If-Match a PATCH must carry: 428 without it.
func requireIfMatch(r *http.Request, missing ifMatchMissing) (ifMatch, *Problem) {
	m, p := parseIfMatch(r)
	if p == nil && !m.present {
		p = problem(http.StatusPreconditionRequired, ProblemPreconditionRequired, string(missing))
		p.Field = "If-Match"
	}
	return m, p
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
func (s *Server) patchRequest(w http.ResponseWriter, r *http.Request, pathProblem *Problem, missing ifMatchMissing) (m ifMatch, key string, body []byte, ok bool) {
	p := pathProblem
	if p == nil {
		m, p = requireIfMatch(r, missing)
	}
	key, body, ok = s.mutationRequest(w, r, p, "")
	return m, key, body, ok
}

// deleteRequest runs the checks a DELETE shares: its path's (pathProblem,
// nil when the path is valid), If-Match (optional) and the
// Idempotency-Key. On a problem it has answered and ok is false.
func (s *Server) deleteRequest(w http.ResponseWriter, r *http.Request, pathProblem *Problem) (m ifMatch, key string, ok bool) {
	p := pathProblem
	if p == nil {
		m, p = parseIfMatch(r)
	}
	if p == nil {
		key, p = parseIdempotencyKey(r)
	}
	if p != nil {
		p.write(w)
		return ifMatch{}, "", false
	}
	return m, key, true
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
