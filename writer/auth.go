package writer

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/ledger-dev/ledger/aggregates"
)

// MinSecretLength is the shortest HS256 secret accepted: 32 bytes, the
// size of the HMAC-SHA256 output (RFC 7518 section 3.2).
const MinSecretLength = 32

// DefaultIssuer and DefaultAudience are the iss and aud tokens must carry
// unless configured otherwise.
const (
	DefaultIssuer   = "ledger"
	DefaultAudience = "ledger"
)

// asymmetricMethods are the JWS algorithms accepted with keys from a JWKS.
var asymmetricMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// AuthConfig configures an Authenticator. At least one of Secret and JWKS
// must be set.
type AuthConfig struct {
	// Secret verifies HS256 tokens; at least MinSecretLength bytes.
	Secret []byte
	// Secrets, when set, supplies the HS256 secrets instead of Secret,
	// consulted for every token (so a rotation needs no restart): a token
	// verifies with any of them (the current and the previous one, during
	// a rotation). Secrets shorter than MinSecretLength are ignored.
	Secrets func() [][]byte
	// JWKS is a JSON Web Key Set (RFC 7517) of public keys verifying
	// RS*, PS*, ES* and EdDSA tokens, chosen by the token's kid (or the
	// only key when the set has one and the token names none).
	JWKS []byte
	// Issuer and Audience are the required iss and aud (defaults
	// DefaultIssuer and DefaultAudience).
	Issuer, Audience string
	// Leeway is the clock skew tolerated on exp, nbf and iat (default 30s).
	Leeway time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// ScopeAdmin is the scope of an admin token: it may create, list and
// change tenants, look accounts up across tenants, and act for every tenant.
const ScopeAdmin = "admin"

// Claims are the claims of a ledger token: the registered ones, the tenant
// the bearer may act for, and its scopes.
type Claims struct {
	jwt.RegisteredClaims
	// Tenant is the tenant the bearer may act for; optional with the admin
	// scope.
	Tenant string `json:"tenant,omitempty"`
	// Scope is a space-separated list of scopes (RFC 8693 section 4.2,
	// RFC 9068); "admin" (ScopeAdmin) grants the platform's operations.
	Scope string `json:"scope,omitempty"`
	// Email and EmailVerified are the OpenID Connect claims (what Cognito
	// and other providers put in ID tokens): the bearer's address, and
	// whether the provider verified that the bearer controls it. Together
	// they prove the address (ProvesEmail).
	Email         string   `json:"email,omitempty"`
	EmailVerified flexBool `json:"email_verified,omitempty"`
	// Documents are the branch document numbers (company registrations)
	// the identity provider verified this bearer may claim (ProvesDocument).
	Documents []string `json:"documents,omitempty"`
}

// flexBool is a boolean claim given as a JSON boolean or, as some identity
// providers send it, the string "true" or "false"; anything else is false.
type flexBool bool

func (b *flexBool) UnmarshalJSON(data []byte) error {
	switch string(data) {
	case "true", `"true"`:
		*b = true
	default:
		*b = false
	}
	return nil
}

// ProvesEmail reports whether the token proves that its bearer may mark
// address (canonical, aggregates.CanonicalEmail) verified: an admin-scoped
// token (the platform verified it), or one whose email_verified claim is
// true and whose email claim spells address's stored form
// (aggregates.EmailClaimProves: the domain in any IDNA form, the local
// part exactly but for ASCII case; no Unicode case folding, so ß does not
// prove ss nor the Kelvin sign k). folded reports a claim that is address
// only under the full canonicalisation, for the refusal to say so.
func (c *Claims) ProvesEmail(address string) (proves, folded bool) {
	if c.Admin() {
		return true, false
	}
	if !bool(c.EmailVerified) || c.Email == "" {
		return false, false
	}
	return aggregates.EmailClaimProves(c.Email, address)
}

// ProvesDocument reports whether the token proves that its bearer may claim
// the branch document number doc (canonical, aggregates.CanonicalDocument):
// an admin-scoped token, or one whose documents claim holds it (in any
// spelling).
func (c *Claims) ProvesDocument(doc string) bool {
	if c.Admin() {
		return true
	}
	for _, d := range c.Documents {
		if cd, err := aggregates.CanonicalDocument(d); err == nil && cd == doc {
			return true
		}
	}
	return false
}

// Admin reports whether the token carries the admin scope.
func (c *Claims) Admin() bool {
	for _, s := range strings.Fields(c.Scope) {
		if s == ScopeAdmin {
			return true
		}
	}
	return false
}

// MayActFor reports whether the bearer may act for tenant: an admin token
// may act for any; another only for the tenant it names.
func (c *Claims) MayActFor(tenant string) bool { return c.Admin() || c.Tenant == tenant }

// Authenticator verifies bearer tokens: signature, expiry (required),
// not-before, issuer and audience, and a valid tenant claim (which an
// admin-scoped token may leave out).
type Authenticator struct {
	parser  *jwt.Parser
	secret  []byte
	secrets func() [][]byte
	keys    *jose.JSONWebKeySet
}

// NewAuthenticator checks cfg and returns an Authenticator. It fails when
// neither a secret nor a key set is given, when the secret is shorter than
// MinSecretLength, or when the key set is not JSON, is empty, or holds a
// private or symmetric key.
func NewAuthenticator(cfg AuthConfig) (*Authenticator, error) {
	a := &Authenticator{}
	var methods []string
	switch {
	case cfg.Secrets != nil:
		a.secrets = cfg.Secrets
		methods = append(methods, "HS256")
	case len(cfg.Secret) > 0:
		if len(cfg.Secret) < MinSecretLength {
			return nil, fmt.Errorf("auth: the HS256 secret has %d bytes; it needs at least %d", len(cfg.Secret), MinSecretLength)
		}
		a.secret = cfg.Secret
		methods = append(methods, "HS256")
	}
	if len(cfg.JWKS) > 0 {
		var set jose.JSONWebKeySet
		if err := json.Unmarshal(cfg.JWKS, &set); err != nil {
			return nil, fmt.Errorf("auth: key set: %w", err)
		}
		if len(set.Keys) == 0 {
			return nil, errors.New("auth: key set has no keys")
		}
		for _, k := range set.Keys {
			if !k.Valid() || !k.IsPublic() {
				return nil, fmt.Errorf("auth: key set: key %q is not a valid public key (private and symmetric keys do not belong in a verifier's key set)", k.KeyID)
			}
		}
		a.keys = &set
		methods = append(methods, asymmetricMethods...)
	}
	if len(methods) == 0 {
		return nil, errors.New("auth: no token verification configured: set an HS256 secret or a JWKS key set")
	}
	if cfg.Issuer == "" {
		cfg.Issuer = DefaultIssuer
	}
	if cfg.Audience == "" {
		cfg.Audience = DefaultAudience
	}
	if cfg.Leeway == 0 {
		cfg.Leeway = 30 * time.Second
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(cfg.Leeway),
	}
	if cfg.Now != nil {
		opts = append(opts, jwt.WithTimeFunc(cfg.Now))
	}
	a.parser = jwt.NewParser(opts...)
	return a, nil
}

// Authenticate verifies token and returns its claims. Any failure is an
// error describing it (for logs; clients only learn that the token is
// invalid).
func (a *Authenticator) Authenticate(token string) (*Claims, error) {
	var c Claims
	if _, err := a.parser.ParseWithClaims(token, &c, a.key); err != nil {
		return nil, err
	}
	if c.Tenant == "" && c.Admin() {
		return &c, nil
	}
	if err := aggregates.ValidateID(c.Tenant); err != nil {
		return nil, fmt.Errorf("tenant claim: %w", err)
	}
	return &c, nil
}

// key picks the verification key for a parsed but unverified token. The
// parser has already checked that its alg is one of the configured methods.
func (a *Authenticator) key(t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	if alg == "HS256" {
		if a.secrets == nil {
			return a.secret, nil
		}
		var set jwt.VerificationKeySet
		for _, s := range a.secrets() {
			if len(s) >= MinSecretLength {
				set.Keys = append(set.Keys, s)
			}
		}
		if len(set.Keys) == 0 {
			return nil, errors.New("no HS256 secret available")
		}
		return set, nil
	}
	if a.keys == nil || !slices.Contains(asymmetricMethods, alg) {
		return nil, fmt.Errorf("no key for alg %s", alg)
	}
	var candidates []jose.JSONWebKey
	if kid, ok := t.Header["kid"].(string); ok {
		candidates = a.keys.Key(kid)
	} else if len(a.keys.Keys) == 1 {
		candidates = a.keys.Keys
	}
	for _, k := range candidates {
		if (k.Algorithm == "" || k.Algorithm == alg) && (k.Use == "" || k.Use == "sig") {
			return k.Key, nil
		}
	}
	return nil, fmt.Errorf("no key in the key set for kid %v and alg %s", t.Header["kid"], alg)
}

// TokenOptions describe a token NewToken mints.
type TokenOptions struct {
	Tenant           string        // required unless Admin
	Admin            bool          // add the admin scope (ScopeAdmin)
	Subject          string        // default "ledgerctl"
	Issuer, Audience string        // defaults DefaultIssuer, DefaultAudience
	TTL              time.Duration // default 1h
	Now              time.Time     // default time.Now()
	// Email, EmailVerified and Documents set the claims of those names
	// (ProvesEmail, ProvesDocument), as an identity provider would.
	Email         string
	EmailVerified bool
	Documents     []string
}

// NewToken mints an HS256 token for a tenant, or an admin token (for a
// tenant or none), with secret, as Authenticator verifies it. It is for local use and tests (ledgerctl token); production
// tokens come from an identity provider.
func NewToken(secret []byte, o TokenOptions) (string, error) {
	if len(secret) < MinSecretLength {
		return "", fmt.Errorf("token: the HS256 secret has %d bytes; it needs at least %d", len(secret), MinSecretLength)
	}
	if o.Tenant != "" || !o.Admin {
		if err := aggregates.ValidateID(o.Tenant); err != nil {
			return "", fmt.Errorf("token: tenant %q: %w", o.Tenant, err)
		}
	}
	if o.Subject == "" {
		o.Subject = "ledgerctl"
	}
	if o.Issuer == "" {
		o.Issuer = DefaultIssuer
	}
	if o.Audience == "" {
		o.Audience = DefaultAudience
	}
	if o.TTL <= 0 {
		o.TTL = time.Hour
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	c := Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    o.Issuer,
			Subject:   o.Subject,
			Audience:  jwt.ClaimStrings{o.Audience},
			IssuedAt:  jwt.NewNumericDate(o.Now),
			NotBefore: jwt.NewNumericDate(o.Now),
			ExpiresAt: jwt.NewNumericDate(o.Now.Add(o.TTL)),
		},
		Tenant: o.Tenant, Email: o.Email, EmailVerified: flexBool(o.EmailVerified), Documents: o.Documents,
	}
	if o.Admin {
		c.Scope = ScopeAdmin
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}
