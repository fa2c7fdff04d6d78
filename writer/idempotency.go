package writer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// Idempotency, in one place.
//
// A mutating request may carry an Idempotency-Key (POST must). Its record,
// IDEMPOTENCY#{tenant}#{key} / REQUEST, holds a fingerprint of the request
// (method, path, If-Match and the body with insignificant whitespace
// removed) and the response the request got. The record is written in the
// same TransactWriteItems as the change, on condition that no live record
// with the key exists (attribute_not_exists(PK) OR expiresAt < now), so
// either both land or neither does: there is never a change without its
// record, nor a record without its change, and no in-progress state that a
// crash could leave behind.
//
// A live record with the request's fingerprint replays its status, headers
// and body (Idempotent-Replayed: true; a refusal's, below); another fingerprint is 422. A PATCH
// reads the record (consistently) before anything else, since its answer
// depends on the state it reads. A create or delete commits straight away:
// if a live record with the key exists (a retry, or a concurrent duplicate
// that committed first) the commit fails on the record's condition, changing
// nothing, and the request then reads the record and answers from it. That
// spares the common case, a new key, a read. A commit cancelled by a
// transaction in progress on the same items is retried a few times with
// jitter; a duplicate still in flight after that is 409.
// A request refused by the state it read (the result of executing it: 404,
// 409 such as tenant-suspended or email-taken, 412, 422 invalid-calendar,
// 422 invalid-field of an amount with more digits than its branch's currency)
// is a result too, as draft-ietf-httpapi-idempotency-key-header has it (a
// retry gets "the result of the previously completed operation, success
// or an error"): its problem is stored under the key with a PutItem on the
// same condition (storeRefusal), so a retry replays it even after the
// state changed (a suspension lifted). What is refused before anything is
// read (400, 401, 403, 413, 415, 428, 429, 503 writes-disabled), what is
// transient (409 request-in-progress and concurrent-modification, 5xx) and
// 422 idempotency-key-reused leave no record: the client corrects or
// retries them. Records live IdempotencyTTL (24 h, attribute
// expiresAt, DynamoDB TTL); an expired record that TTL has not deleted yet
// is treated as absent.

// maxCommitAttempts bounds how often one request tries to commit when
// transactions conflict.
const maxCommitAttempts = 4

// response is what a mutation answers when its change commits, and what its
// idempotency record stores.
type response struct {
	status   int
	body     []byte // JSON; empty for 204
	location string
	etag     string
	problem  bool // body is a problem document (a stored refusal)
}

func jsonResponse(status int, v any) response {
	body, _ := json.Marshal(v)
	return response{status: status, body: append(body, '\n')}
}

// versionedResponse is jsonResponse with version as the ETag.
func versionedResponse(status int, v any, version int64) response {
	resp := jsonResponse(status, v)
	resp.etag = etag(version)
	return resp
}

func (resp response) write(w http.ResponseWriter, replayed bool) {
	h := w.Header()
	if resp.location != "" {
		h.Set("Location", resp.location)
	}
	if resp.etag != "" {
		h.Set("ETag", resp.etag)
	}
	if replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	h.Set("Cache-Control", "no-store")
	switch {
	case resp.problem:
		h.Set("Content-Type", "application/problem+json")
		h.Set("X-Content-Type-Options", "nosniff")
	case len(resp.body) > 0:
		h.Set("Content-Type", "application/json")
	}
	w.WriteHeader(resp.status)
	if len(resp.body) > 0 {
		_, _ = w.Write(resp.body)
	}
}

// maxIdempotencyKey bounds the Idempotency-Key header.
const maxIdempotencyKey = 128

// parseIdempotencyKey reads the Idempotency-Key header: "" when absent. The
// value may be quoted (an RFC 8941 string, as the IETF draft has it) or
// bare; it must be 1 to 128 ASCII letters, digits or -_.:+/= characters.
func parseIdempotencyKey(r *http.Request) (string, *Problem) {
	values := r.Header.Values("Idempotency-Key")
	if len(values) == 0 {
		return "", nil
	}
	bad := func(detail string) (string, *Problem) {
		return "", fieldProblem("Idempotency-Key", detail)
	}
	if len(values) > 1 {
		return bad("give the header once")
	}
	k := strings.TrimSpace(values[0])
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
	}
	if k == "" || len(k) > maxIdempotencyKey {
		return bad(fmt.Sprintf("must be 1 to %d characters", maxIdempotencyKey))
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:+/=", c) >= 0) {
			return bad("use ASCII letters, digits and -_.:+/= only (a UUID or ULID is ideal)")
		}
	}
	return k, nil
}

// fingerprint identifies a request for idempotency: the same key with
// another fingerprint is a different request. The path counts as the route
// it was served by, with its parameters decoded (decodedRoute), so that
// spellings of one path that differ only in percent-encoding ("/v1/tenants/%74a"
// and "/v1/tenants/ta") are one request.
//
// The value is the fingerprint, a space, and the fingerprint as writers
// before issue 13 computed it (over the path as sent): records are stored
// with the first, and a record with either is this request, so a request
// committed before the upgrade and retried after it still replays. (The
// second can go once no record older than the upgrade lives: 24 h.)
func fingerprint(r *http.Request, body []byte) string {
	var compact bytes.Buffer
	if json.Compact(&compact, body) == nil {
		body = compact.Bytes()
	}
	sum := func(path string) string {
		h := sha256.New()
		fmt.Fprintf(h, "%s\n%s\n%s\n", r.Method, path, strings.TrimSpace(r.Header.Get("If-Match")))
		h.Write(body)
		return hex.EncodeToString(h.Sum(nil))
	}
	return sum(decodedRoute(r)) + " " + sum(r.URL.EscapedPath())
}

// sameRequest reports whether a record's fingerprint is one of fp's
// (fingerprint).
func sameRequest(recorded, fp string) bool {
	current, legacy, _ := strings.Cut(fp, " ")
	return recorded == current || recorded == legacy && legacy != ""
}

// decodedRoute is the route pattern that served r followed by the decoded
// value of each of its wildcards, quoted ("…/{tenant}/…\ntenant=\"ta\""):
// what the handler acted on, whatever the path's percent-encoding. Without
// a pattern (a handler called directly) it is the decoded path.
func decodedRoute(r *http.Request) string {
	if r.Pattern == "" {
		return strconv.Quote(r.URL.Path)
	}
	var b strings.Builder
	b.WriteString(r.Pattern)
	rest := r.Pattern
	for {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			break
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			break
		}
		name := strings.TrimSuffix(rest[i+1:i+j], "...")
		b.WriteString("\n" + name + "=" + strconv.Quote(r.PathValue(name)))
		rest = rest[i+j+1:]
	}
	return b.String()
}

// mutation is one mutating request, executed by Server.mutate.
type mutation struct {
	tenant  string // "" for a request of no tenant (the platform's key scope)
	idemKey string // "" without Idempotency-Key
	fp      string
	// lookupFirst reads the idempotency record before the first attempt.
	// A mutation whose prepare cannot answer from the current state (create,
	// delete) skips it: its commit fails on a taken key and the record is
	// read then, which saves a read on every first request.
	lookupFirst bool
	// prepare reads what the mutation needs and returns its change (each
	// action with what its failed condition means) and the response it
	// gives when the change commits, or a problem. A nil change
	// with no problem means there is nothing to write: the response is
	// answered as it is, without a record.
	prepare func(ctx context.Context) (*change, response, *Problem, error)
	// committed, when set, is called once the change has committed.
	committed func()
}

// mutate executes m under its idempotency key and writes the answer. It
// consults the flags first (writesAllowed): a request they refuse reads and
// changes nothing.
func (s *Server) mutate(w http.ResponseWriter, r *http.Request, m mutation) {
	ctx := r.Context()
	if p := s.writesAllowed(ctx); p != nil {
		p.write(w)
		return
	}
	var idemKey aggregates.Key
	switch {
	case m.idemKey == "":
	case m.tenant == "":
		idemKey = aggregates.PlatformIdempotencyKey(m.idemKey)
	default:
		idemKey = aggregates.IdempotencyKey(m.tenant, m.idemKey)
	}
	// inFlight says whether the last attempt failed on the idempotency
	// record (a duplicate committing) rather than on the change's items.
	inFlight := false
	for attempt := 1; attempt <= maxCommitAttempts; attempt++ {
		if attempt > 1 {
			if err := sleepJitter(ctx, attempt); err != nil {
				s.fail(w, r, err)
				return
			}
		}
		looked := false
		if m.idemKey != "" && (attempt > 1 || m.lookupFirst) {
			if s.replayed(w, r, idemKey, m.fp) {
				return
			}
			looked = true
		}
		ch, resp, p, err := m.prepare(ctx)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if p != nil {
			// A refusal from the state prepare read (a suspended tenant, a
			// missing item) must not hide the answer a retried request got
			// when it committed: the record, if any, answers.
			if m.idemKey != "" && !looked && s.replayed(w, r, idemKey, m.fp) {
				return
			}
			s.refuse(w, r, m, idemKey, p)
			return
		}
		if ch == nil { // nothing to change: answer the current state
			resp.write(w, false)
			return
		}
		var idem *ddbtypes.Put
		if m.idemKey != "" {
			idem = s.idemPut(idemKey, m.fp, resp)
		}
		out, failed, err := s.commit(ctx, ch, idem)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		switch out {
		case committed:
			if m.committed != nil {
				m.committed()
			}
			s.metrics.Writes.WithLabelValues(ch.op).Inc()
			resp.write(w, false)
			return
		case conditionFailed:
			inFlight = false
			p, retry, err := ch.explain(ctx, failed)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			if !retry {
				s.refuse(w, r, m, idemKey, p)
				return
			}
		case keyTaken, conflicted:
			// Read the record again (or prepare again) on the next attempt.
			inFlight = out == keyTaken || failed.onRecord
		}
	}
	if m.idemKey != "" && inFlight {
		s.metrics.IdempotencyRejections.WithLabelValues("in_flight").Inc()
		p := problem(http.StatusConflict, ProblemRequestInProgress, "a request with this Idempotency-Key is being executed; retry it shortly to get its answer")
		p.Field = "Idempotency-Key"
		p.withHeader("Retry-After", "1").write(w)
		return
	}
	problem(http.StatusConflict, ProblemConcurrentModification, "the resource kept changing during the request; retry").
		withHeader("Retry-After", "1").write(w)
}

// refuse answers p, the refusal of m by the state it read, after storing
// it under m's Idempotency-Key (at idemKey) when it is a result
// (storedRefusal): a retry replays it. When a concurrent duplicate took
// the key first, its record answers. A failure to store is logged and p
// answered all the same (the retry then executes again, as without the
// key).
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, m mutation, idemKey aggregates.Key, p *Problem) {
	if m.idemKey == "" || !storedRefusal(p) {
		p.write(w)
		return
	}
	resp := problemResponse(p, requestIDOf(r))
	put := s.idemPut(idemKey, m.fp, resp)
	_, err := s.api.PutItem(r.Context(), &dynamodb.PutItemInput{TableName: put.TableName, Item: put.Item,
		ConditionExpression: put.ConditionExpression, ExpressionAttributeNames: put.ExpressionAttributeNames,
		ExpressionAttributeValues: put.ExpressionAttributeValues})
	var ccf *ddbtypes.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		s.metrics.ConditionalCheckFailures.WithLabelValues("idempotency").Inc()
		if s.replayed(w, r, idemKey, m.fp) {
			return
		}
	case err != nil:
		s.cfg.Logger.Warn("idempotency record of a refusal not stored", "method", r.Method, "path", r.URL.Path,
			"request_id", requestIDOf(r), "err", s.dynamoError("PutItem", err))
	}
	p.write(w)
}

// storedRefusal reports whether p, a refusal by the state a request read,
// is kept under its Idempotency-Key: every 4xx but the transient ones.
func storedRefusal(p *Problem) bool {
	switch {
	case p.Status < 400 || p.Status >= 500, p.Status == http.StatusTooManyRequests:
		return false
	case p.Type == ProblemRequestInProgress, p.Type == ProblemConcurrentModification, p.Type == ProblemIdempotencyKeyReused:
		return false
	}
	return true
}

// problemResponse is p as an idempotency record keeps it: its body with
// the instance of the request that got it (requestID), and its ETag.
func problemResponse(p *Problem, requestID string) response {
	doc := *p
	if doc.Instance == "" && requestID != "" {
		doc.Instance = RequestInstance(requestID)
	}
	body, _ := json.Marshal(&doc)
	return response{status: p.Status, body: append(body, '\n'), etag: p.header.Get("ETag"), problem: true}
}

// replayed answers from the live idempotency record at key, if there is
// one: its response when fp is its request's, 422 otherwise. It says
// whether it answered (it also has when reading the record failed).
func (s *Server) replayed(w http.ResponseWriter, r *http.Request, key aggregates.Key, fp string) bool {
	rec, err := s.lookup(r.Context(), key)
	switch {
	case err != nil:
		s.fail(w, r, err)
		return true
	case rec == nil:
		return false
	case !sameRequest(rec.fingerprint, fp):
		s.metrics.IdempotencyRejections.WithLabelValues("mismatch").Inc()
		p := problem(http.StatusUnprocessableEntity, ProblemIdempotencyKeyReused,
			"this Idempotency-Key was used for another request (method, path, If-Match or body differ); use a new key for a new request")
		p.Field = "Idempotency-Key"
		p.write(w)
		return true
	}
	s.metrics.IdempotentReplays.Inc()
	rec.resp.write(w, true)
	return true
}

// sleepJitter waits before commit attempt n (n ≥ 2): a random 5–25 ms
// times n-1.
func sleepJitter(ctx context.Context, n int) error {
	d := time.Duration(n-1) * time.Duration(5+rand.IntN(20)) * time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// etag formats a version as a strong entity tag.
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }
