package writer

import (
	"context"
	"net/http"

	"github.com/oklog/ulid/v2"
)

// Request ids, in one place.
//
// Every response carries X-Request-Id. A client may send its own (to find
// its request in the writer's logs under a name it chose): it is kept when
// well-formed, 1 to maxRequestID characters of A-Z a-z 0-9 . _ : -, given
// once; anything else is replaced by a fresh id, never echoed (a request
// id lands in logs and problem documents, so only a safe shape passes). A
// fresh id is a ULID. The id is every problem document's instance, as
// RequestInstance makes it, and every request log line's request_id.

// RequestIDHeader is the request and response header carrying the request id.
const RequestIDHeader = "X-Request-Id"

// maxRequestID bounds a client's request id.
const maxRequestID = 128

// RequestInstancePrefix prefixes a request id to make a problem's instance,
// a URI (RFC 9457 §3.1.5: a URI reference naming this occurrence).
const RequestInstancePrefix = "urn:ledger:request:"

// RequestInstance is the instance of the problems answered to the request
// with id id.
func RequestInstance(id string) string { return RequestInstancePrefix + id }

// validRequestID reports whether a client's request id is kept.
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// requestID returns the client's request id when it is given once and well
// formed, else a fresh ULID.
func requestID(r *http.Request) string {
	if vs := r.Header.Values(RequestIDHeader); len(vs) == 1 && validRequestID(vs[0]) {
		return vs[0]
	}
	return ulid.Make().String()
}

type requestIDKey struct{}

// withRequestID names the request: it sets the response's X-Request-Id
// and puts the id in the request's context (requestIDOf).
func withRequestID(w http.ResponseWriter, r *http.Request) *http.Request {
	id := requestID(r)
	w.Header().Set(RequestIDHeader, id)
	return r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
}

// requestIDOf is the id withRequestID gave the request ("" when none).
func requestIDOf(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey{}).(string)
	return id
}
