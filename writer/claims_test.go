package writer_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

// The OIDC claims that prove an address, as providers send them:
// email_verified as a JSON boolean or as the string "true" (anything else
// proves nothing), the email in any spelling of the mailbox.
func TestClaims_ProveAnAddressOrADocument(t *testing.T) {
	auth, err := writer.NewAuthenticator(writer.AuthConfig{Secret: []byte(testSecret)})
	require.NoError(t, err)
	claims := func(extra jwt.MapClaims) *writer.Claims {
		c := jwt.MapClaims{"iss": writer.DefaultIssuer, "aud": writer.DefaultAudience, "tenant": "acme",
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
		for k, v := range extra {
			c[k] = v
		}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(testSecret))
		require.NoError(t, err)
		got, err := auth.Authenticate(tok)
		require.NoError(t, err)
		return got
	}
	const address = "josé@bücher.de"
	for _, c := range []struct {
		extra jwt.MapClaims
		want  bool
	}{
		{jwt.MapClaims{"email": address, "email_verified": true}, true},
		{jwt.MapClaims{"email": "JOSE\u0301@xn--bcher-kva.de", "email_verified": "true"}, true},
		{jwt.MapClaims{"email": address, "email_verified": false}, false},
		{jwt.MapClaims{"email": address, "email_verified": "yes"}, false},
		{jwt.MapClaims{"email": address}, false},
		{jwt.MapClaims{"email": "other@bücher.de", "email_verified": true}, false},
		{jwt.MapClaims{"email": "JOSÉ@Bücher.DE", "email_verified": true}, true},
		{jwt.MapClaims{"scope": "admin"}, true},
	} {
		got, _ := claims(c.extra).ProvesEmail(address)
		assert.Equal(t, c.want, got, "%v", c.extra)
	}
	assert.True(t, claims(jwt.MapClaims{"documents": []string{"12.345.678/0001-90"}}).ProvesDocument("12345678000190"))
	assert.False(t, claims(jwt.MapClaims{"documents": []string{"12345678000191"}}).ProvesDocument("12345678000190"))
	assert.False(t, claims(nil).ProvesDocument("12345678000190"))
}
