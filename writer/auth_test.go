package writer_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

func claims(tenant string, mutate func(*writer.Claims)) *writer.Claims {
	now := time.Now()
	c := &writer.Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: "ledger", Audience: jwt.ClaimStrings{"ledger"}, Subject: "test",
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)),
		},
		Tenant: tenant,
	}
	if mutate != nil {
		mutate(c)
	}
	return c
}

func hs256(t *testing.T, secret string, c jwt.Claims) string {
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
	require.NoError(t, err)
	return tok
}

func TestAuth_MissingOrInvalidTokenIs401AndReadsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"INCOME","amount":"5","category":"a"}`)
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims(e.tenant, nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	cases := map[string]string{
		"no header":       "",
		"basic scheme":    "Basic dXNlcjpwYXNz",
		"empty bearer":    "Bearer ",
		"garbage":         "Bearer not.a.jwt",
		"wrong secret":    "Bearer " + hs256(t, "another-secret-0123456789abcdef-0123456789", claims(e.tenant, nil)),
		"alg none":        "Bearer " + none,
		"expired":         "Bearer " + hs256(t, testSecret, claims(e.tenant, func(c *writer.Claims) { c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-time.Hour)) })),
		"no expiry":       "Bearer " + hs256(t, testSecret, claims(e.tenant, func(c *writer.Claims) { c.ExpiresAt = nil })),
		"not yet valid":   "Bearer " + hs256(t, testSecret, claims(e.tenant, func(c *writer.Claims) { c.NotBefore = jwt.NewNumericDate(time.Now().Add(time.Hour)) })),
		"wrong issuer":    "Bearer " + hs256(t, testSecret, claims(e.tenant, func(c *writer.Claims) { c.Issuer = "evil" })),
		"wrong audience":  "Bearer " + hs256(t, testSecret, claims(e.tenant, func(c *writer.Claims) { c.Audience = jwt.ClaimStrings{"other"} })),
		"no tenant":       "Bearer " + hs256(t, testSecret, claims("", nil)),
		"tenant with '#'": "Bearer " + hs256(t, testSecret, claims(e.tenant+"#BRANCH#north", nil)),
	}
	before := e.dynamoCalls()
	for name, auth := range cases {
		t.Run(name, func(t *testing.T) {
			for _, rq := range []req{
				{method: "GET", path: e.base() + "/transactions/" + tx.ID},
				{method: "POST", path: e.base() + "/transactions", body: `{"type":"INCOME","amount":"1","category":"a"}`, headers: []string{"Idempotency-Key", newKey()}},
			} {
				rq.headers = append(rq.headers, "Authorization", auth)
				r := e.send(rq)
				require.Equal(t, http.StatusUnauthorized, r.Status, "answer %s", r)
				assert.Equal(t, writer.ProblemUnauthenticated, r.problem(t).Type)
				assert.Contains(t, r.Header.Get("WWW-Authenticate"), "Bearer")
			}
		})
	}
	assert.Equal(t, before, e.dynamoCalls(), "no unauthenticated request reached DynamoDB")
	assert.Equal(t, 1, e.countTransactions(e.tenant, e.branch))
}

func TestAuth_OtherTenantsTokenIs403AndNothingIsReadOrWritten(t *testing.T) {
	t.Parallel()
	victim := newEnv(t, sharedTable(t))
	tx := victim.create(`{"type":"INCOME","amount":"5","category":"a","createdAt":"2024-07-01T00:00:00Z"}`)
	attacker := newEnv(t, victim.table)
	attacker.tenant = victim.tenant // the attacker's paths name the victim; its token names itself
	missingID := "01J1Z7ZZZZZZZZZZZZZZZZZZZZ"
	base := victim.base()
	before := attacker.dynamoCalls()
	var bodies []string
	for name, rq := range map[string]req{
		"get existing":    {method: "GET", path: base + "/transactions/" + tx.ID},
		"get missing":     {method: "GET", path: base + "/transactions/" + missingID},
		"list":            {method: "GET", path: base + "/transactions"},
		"create":          {method: "POST", path: base + "/transactions", body: `{"type":"INCOME","amount":"1","category":"a"}`, headers: []string{"Idempotency-Key", newKey()}},
		"patch existing":  {method: "PATCH", path: base + "/transactions/" + tx.ID, body: `{"amount":"1"}`, headers: []string{"If-Match", "1"}},
		"patch missing":   {method: "PATCH", path: base + "/transactions/" + missingID, body: `{"amount":"1"}`, headers: []string{"If-Match", "1"}},
		"delete existing": {method: "DELETE", path: base + "/transactions/" + tx.ID},
		"delete missing":  {method: "DELETE", path: base + "/transactions/" + missingID},
		"report":          {method: "GET", path: base + "/reports/MONTHLY/2024-07"},
		"report range":    {method: "GET", path: base + "/reports?period=DAILY&from=2024-07-01&to=2024-07-31"},
		"other branch":    {method: "GET", path: "/v1/tenants/" + victim.tenant + "/branches/south/transactions"},
	} {
		r := attacker.send(rq)
		require.Equal(t, http.StatusForbidden, r.Status, "%s: answer %s", name, r)
		assert.Equal(t, writer.ProblemForbidden, r.problem(t).Type, name)
		// The instance names the request (its X-Request-Id), nothing else.
		bodies = append(bodies, strings.Replace(string(r.Body), r.problem(t).Instance, "", 1))
	}
	for _, b := range bodies {
		assert.Equal(t, bodies[0], b, "every 403 is the same, whether or not the resource exists")
	}
	assert.Equal(t, before, attacker.dynamoCalls(), "no cross-tenant request reached DynamoDB")
	r := victim.send(req{method: "GET", path: base + "/transactions/" + tx.ID})
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, tx, r.transaction(t), "the victim's transaction is unchanged")
	assert.Equal(t, 1, victim.countTransactions(victim.tenant, victim.branch))
}

func TestAuthenticator_JWKSKeysVerifyAsymmetricTokens(t *testing.T) {
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	edPub, edKey, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	otherEC, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &ecKey.PublicKey, KeyID: "ec-1", Algorithm: "ES256", Use: "sig"},
		{Key: edPub, KeyID: "ed-1"},
	}}
	raw, err := json.Marshal(set)
	require.NoError(t, err)
	a, err := writer.NewAuthenticator(writer.AuthConfig{JWKS: raw})
	require.NoError(t, err)

	sign := func(m jwt.SigningMethod, kid string, key any) string {
		tok := jwt.NewWithClaims(m, claims("acme", nil))
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		require.NoError(t, err)
		return s
	}
	c, err := a.Authenticate(sign(jwt.SigningMethodES256, "ec-1", ecKey))
	require.NoError(t, err)
	assert.Equal(t, "acme", c.Tenant)
	_, err = a.Authenticate(sign(jwt.SigningMethodEdDSA, "ed-1", edKey))
	require.NoError(t, err)

	for name, tok := range map[string]string{
		"unknown kid":          sign(jwt.SigningMethodES256, "nope", ecKey),
		"no kid, several keys": sign(jwt.SigningMethodES256, "", ecKey),
		"other key, same kid":  sign(jwt.SigningMethodES256, "ec-1", otherEC),
		"alg not the key's":    sign(jwt.SigningMethodEdDSA, "ec-1", edKey),
		"HS256 without secret": hs256(t, testSecret, claims("acme", nil)),
	} {
		_, err := a.Authenticate(tok)
		assert.Error(t, err, name)
	}

	// Both configured: each kind of token verifies with its own key.
	both, err := writer.NewAuthenticator(writer.AuthConfig{JWKS: raw, Secret: []byte(testSecret)})
	require.NoError(t, err)
	_, err = both.Authenticate(hs256(t, testSecret, claims("acme", nil)))
	require.NoError(t, err)
	_, err = both.Authenticate(sign(jwt.SigningMethodES256, "ec-1", ecKey))
	require.NoError(t, err)
}

func TestNewAuthenticator_RefusesMissingOrWeakKeys(t *testing.T) {
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	private, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: ecKey, KeyID: "k"}}})
	require.NoError(t, err)
	symmetric, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: []byte(testSecret), KeyID: "k"}}})
	require.NoError(t, err)
	for name, cfg := range map[string]writer.AuthConfig{
		"nothing":         {},
		"short secret":    {Secret: []byte("short")},
		"not JSON":        {JWKS: []byte("{")},
		"empty key set":   {JWKS: []byte(`{"keys":[]}`)},
		"private key":     {JWKS: private},
		"symmetric key":   {JWKS: symmetric},
		"secret 31 bytes": {Secret: []byte("0123456789012345678901234567890")},
	} {
		_, err := writer.NewAuthenticator(cfg)
		assert.Error(t, err, name)
	}
}

func TestNewToken_MintsWhatTheAuthenticatorAccepts(t *testing.T) {
	a, err := writer.NewAuthenticator(writer.AuthConfig{Secret: []byte(testSecret), Issuer: "iss", Audience: "aud"})
	require.NoError(t, err)
	tok, err := writer.NewToken([]byte(testSecret), writer.TokenOptions{Tenant: "acme", Issuer: "iss", Audience: "aud", TTL: time.Minute})
	require.NoError(t, err)
	c, err := a.Authenticate(tok)
	require.NoError(t, err)
	assert.Equal(t, "acme", c.Tenant)
	assert.WithinDuration(t, time.Now().Add(time.Minute), c.ExpiresAt.Time, 5*time.Second)

	_, err = writer.NewToken([]byte(testSecret), writer.TokenOptions{Tenant: "a#b"})
	assert.Error(t, err)
	_, err = writer.NewToken([]byte("short"), writer.TokenOptions{Tenant: "acme"})
	assert.Error(t, err)
	defaults, err := writer.NewToken([]byte(testSecret), writer.TokenOptions{Tenant: "acme"})
	require.NoError(t, err)
	_, err = a.Authenticate(defaults)
	assert.Error(t, err, "issuer and audience differ from the authenticator's")
}
