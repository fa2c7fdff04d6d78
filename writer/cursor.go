package writer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
)

// A cursor is where a listing stopped: the sort key of the last transaction
// returned, bound to the tenant, branch and filters of the listing that
// issued it, and signed with HMAC-SHA256 under the server's cursor key. The
// client cannot read anything useful into it nor forge one: a cursor that was
// altered, was issued by a server with another key, or is presented for
// another tenant, branch or filter set is refused (400 invalid-cursor) before
// any read. The sort key inside is only ever used with the partition of the
// path's (authorized) tenant and branch.
type cursor struct {
	V      int    `json:"v"`
	Tenant string `json:"t"`
	Branch string `json:"b"`
	Query  string `json:"q"`  // canonical form of the listing's filters
	SK     string `json:"sk"` // exclusive start sort key
}

const cursorVersion = 1

var errBadCursor = errors.New("invalid cursor")

// cursorCodec signs and verifies cursors.
type cursorCodec struct{ key []byte }

func (c cursorCodec) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte("ledger cursor v1\x00"))
	m.Write(payload)
	return m.Sum(nil)
}

func (c cursorCodec) encode(cur cursor) string {
	cur.V = cursorVersion
	payload, _ := json.Marshal(cur)
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(c.mac(payload))
}

// decode verifies s and returns its cursor if it was issued for the listing
// (tenant, branch, query). Any failure is errBadCursor, without saying which
// check failed.
func (c cursorCodec) decode(s, tenant, branch, query string) (cursor, error) {
	if len(s) > 2048 {
		return cursor{}, errBadCursor
	}
	p, m, ok := strings.Cut(s, ".")
	if !ok {
		return cursor{}, errBadCursor
	}
	enc := base64.RawURLEncoding
	payload, err1 := enc.DecodeString(p)
	sig, err2 := enc.DecodeString(m)
	if err1 != nil || err2 != nil || !hmac.Equal(sig, c.mac(payload)) {
		return cursor{}, errBadCursor
	}
	var cur cursor
	if err := json.Unmarshal(payload, &cur); err != nil {
		return cursor{}, errBadCursor
	}
	if cur.V != cursorVersion || cur.Tenant != tenant || cur.Branch != branch || cur.Query != query || cur.SK == "" {
		return cursor{}, errBadCursor
	}
	return cur, nil
}
