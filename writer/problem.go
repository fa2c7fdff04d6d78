package writer

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/oklog/ulid/v2"
)

// ProblemBase prefixes every problem type: the types are URIs (RFC 9457)
// that resolve to their section of docs/api.md.
const ProblemBase = "https://github.com/ledger-dev/ledger/blob/main/docs/api.md#"

// The problem types the writer answers with. Their values are stable: clients
// may switch on them. docs/api.md describes each.
const (
	ProblemInvalidField           = ProblemBase + "invalid-field"            // 400: a path, query, header or body field is invalid
	ProblemInvalidJSON            = ProblemBase + "invalid-json"             // 400: the body is not one JSON object
	ProblemInvalidRequest         = ProblemBase + "invalid-request"          // 400: the transport could not make an HTTP request of it (the Lambda adapter)
	ProblemUnknownField           = ProblemBase + "unknown-field"            // 400: the body has a field the resource does not have
	ProblemInvalidCursor          = ProblemBase + "invalid-cursor"           // 400: the cursor was not issued for this listing
	ProblemIdempotencyKeyRequired = ProblemBase + "idempotency-key-required" // 400: POST without Idempotency-Key
	ProblemUnauthenticated        = ProblemBase + "unauthenticated"          // 401: no valid bearer token
	ProblemForbidden              = ProblemBase + "forbidden"                // 403: the token is for another tenant, or not admin-scoped
	ProblemEmailNotProven         = ProblemBase + "email-not-proven"         // 403: the token does not prove the address it would mark verified
	ProblemDocumentNotProven      = ProblemBase + "document-not-proven"      // 403: the token does not prove the document number it would claim
	ProblemSuspendedByAdmin       = ProblemBase + "suspended-by-admin"       // 403: a tenant's token would lift an admin's suspension
	ProblemNotFound               = ProblemBase + "not-found"                // 404
	ProblemMethodNotAllowed       = ProblemBase + "method-not-allowed"       // 405
	ProblemRequestInProgress      = ProblemBase + "request-in-progress"      // 409: a request with this Idempotency-Key is in flight
	ProblemConcurrentModification = ProblemBase + "concurrent-modification"  // 409: the item kept changing under the request
	ProblemAlreadyExists          = ProblemBase + "already-exists"           // 409: a tenant or branch with this id exists
	ProblemEmailTaken             = ProblemBase + "email-taken"              // 409: the email address belongs to an account
	ProblemDocumentTaken          = ProblemBase + "document-taken"           // 409: the document number belongs to a branch
	ProblemTenantSuspended        = ProblemBase + "tenant-suspended"         // 409: the tenant takes no new transactions
	ProblemBranchSuspended        = ProblemBase + "branch-suspended"         // 409: the branch takes no new transactions
	ProblemBranchHasTransactions  = ProblemBase + "branch-has-transactions"  // 409: a branch with transactions cannot be deleted
	ProblemEmailNotVerified       = ProblemBase + "email-not-verified"       // 409: only a verified email can be primary
	ProblemPrimaryEmail           = ProblemBase + "primary-email"            // 409: the primary email cannot be removed
	ProblemTooManyEmails          = ProblemBase + "too-many-emails"          // 409: the account has the most emails allowed
	ProblemAccountDeleted         = ProblemBase + "account-deleted"          // 409: a deleted account does not change
	ProblemVersionMismatch        = ProblemBase + "version-mismatch"         // 412: If-Match names another version
	ProblemBodyTooLarge           = ProblemBase + "body-too-large"           // 413
	ProblemUnsupportedMediaType   = ProblemBase + "unsupported-media-type"   // 415
	ProblemIdempotencyKeyReused   = ProblemBase + "idempotency-key-reused"   // 422: the key was used for another request
	ProblemInvalidCalendar        = ProblemBase + "invalid-calendar"         // 422: a calendar field or reportPeriods is not acceptable, or createdAt falls outside the calendar's years
	ProblemCurrencyRequired       = ProblemBase + "currency-required"        // 422: a roll-up read without currency of a tenant whose branches have several
	ProblemTooManyCurrencies      = ProblemBase + "too-many-currencies"      // 422: a branch currency past the tenant's cap (Config.MaxTenantCurrencies)
	ProblemPreconditionRequired   = ProblemBase + "precondition-required"    // 428: PATCH without If-Match
	ProblemRateLimited            = ProblemBase + "rate-limited"             // 429: the tenant sends more than its rate
	ProblemInternal               = ProblemBase + "internal"                 // 500
	ProblemWritesDisabled         = ProblemBase + "writes-disabled"          // 503: the flags say no writes
	ProblemFlagsUnavailable       = ProblemBase + "flags-unavailable"        // 503: the flags cannot be read
	ProblemUnavailable            = ProblemBase + "unavailable"              // 503: DynamoDB throttled or timed out
)

// Problem is an RFC 9457 problem details object, the body of every error
// response (Content-Type application/problem+json).
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Field names the offending input: a body field ("amount"), a path
	// parameter ("branch"), a query parameter ("limit") or a header
	// ("Idempotency-Key").
	Field string `json:"field,omitempty"`
	// Instance names this occurrence: the request's id as a URI
	// (RequestInstance), set when the problem is written.
	Instance string `json:"instance,omitempty"`
	// CurrentVersion is the resource's version on a version mismatch.
	CurrentVersion *int64 `json:"currentVersion,omitempty"`

	header http.Header // extra response headers (Allow, Retry-After, ETag, WWW-Authenticate)
}

var problemTitles = map[string]string{
	ProblemInvalidField:           "Invalid field",
	ProblemInvalidJSON:            "Invalid JSON body",
	ProblemInvalidRequest:         "Invalid request",
	ProblemUnknownField:           "Unknown field",
	ProblemInvalidCursor:          "Invalid cursor",
	ProblemIdempotencyKeyRequired: "Idempotency-Key required",
	ProblemUnauthenticated:        "Unauthenticated",
	ProblemForbidden:              "Forbidden",
	ProblemEmailNotProven:         "Email address not proven",
	ProblemDocumentNotProven:      "Document number not proven",
	ProblemSuspendedByAdmin:       "Suspended by an admin",
	ProblemNotFound:               "Not found",
	ProblemMethodNotAllowed:       "Method not allowed",
	ProblemRequestInProgress:      "Request in progress",
	ProblemConcurrentModification: "Concurrent modification",
	ProblemAlreadyExists:          "Already exists",
	ProblemEmailTaken:             "Email address taken",
	ProblemDocumentTaken:          "Document number taken",
	ProblemTenantSuspended:        "Tenant suspended",
	ProblemBranchSuspended:        "Branch suspended",
	ProblemBranchHasTransactions:  "Branch has transactions",
	ProblemEmailNotVerified:       "Email address not verified",
	ProblemPrimaryEmail:           "Primary email address",
	ProblemTooManyEmails:          "Too many email addresses",
	ProblemAccountDeleted:         "Account deleted",
	ProblemVersionMismatch:        "Version mismatch",
	ProblemBodyTooLarge:           "Body too large",
	ProblemUnsupportedMediaType:   "Unsupported media type",
	ProblemIdempotencyKeyReused:   "Idempotency-Key reused",
	ProblemInvalidCalendar:        "Invalid calendar",
	ProblemCurrencyRequired:       "Currency required",
	ProblemTooManyCurrencies:      "Too many currencies",
	ProblemPreconditionRequired:   "Precondition required",
	ProblemRateLimited:            "Rate limited",
	ProblemInternal:               "Internal error",
	ProblemWritesDisabled:         "Writes disabled",
	ProblemFlagsUnavailable:       "Flags unavailable",
	ProblemUnavailable:            "Service unavailable",
}

func (p *Problem) Error() string {
	if p.Field != "" {
		return p.Title + ": " + p.Field + ": " + p.Detail
	}
	return p.Title + ": " + p.Detail
}

// problem builds a problem of type typ.
func problem(status int, typ, detail string) *Problem {
	return &Problem{Type: typ, Title: problemTitles[typ], Status: status, Detail: detail}
}

// fieldProblem is a 400 about one field.
func fieldProblem(field, detail string) *Problem {
	p := problem(http.StatusBadRequest, ProblemInvalidField, detail)
	p.Field = field
	return p
}

func (p *Problem) withHeader(name, value string) *Problem {
	if p.header == nil {
		p.header = http.Header{}
	}
	p.header.Set(name, value)
	return p
}

func versionMismatch(current int64) *Problem {
	p := problem(http.StatusPreconditionFailed, ProblemVersionMismatch,
		"the resource is at version "+strconv.FormatInt(current, 10)+"; fetch it and retry with If-Match set to that version")
	p.Field = "If-Match"
	p.CurrentVersion = &current
	return p.withHeader("ETag", etag(current))
}

func (p *Problem) write(w http.ResponseWriter) {
	for name, values := range p.header {
		w.Header()[name] = values
	}
	doc := *p
	if id := w.Header().Get(RequestIDHeader); id != "" && doc.Instance == "" {
		doc.Instance = RequestInstance(id)
	}
	body, _ := json.Marshal(&doc)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// WriteInvalidRequest answers a request that never became an
// *http.Request for the server (cmd/writer's Lambda adapter: an event whose
// body is not base64, or whose method or path no request can have): 400
// invalid-request, a problem like every answer of the writer, with a
// request id (the client's X-Request-Id, clientID, when well-formed, as
// the server keeps it; otherwise a fresh one) as X-Request-Id and instance.
func WriteInvalidRequest(w http.ResponseWriter, clientID, detail string) {
	id := clientID
	if !validRequestID(id) {
		id = ulid.Make().String()
	}
	w.Header().Set(RequestIDHeader, id)
	problem(http.StatusBadRequest, ProblemInvalidRequest, detail).write(w)
}

// notFoundOf is a 404 naming what is missing.
func notFoundOf(what string) *Problem {
	return problem(http.StatusNotFound, ProblemNotFound, "no such "+what)
}
