package writerapi_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/cmd/ledgerctl/internal/writerapi"
)

// What a client generated from the document looks like to a Go program:
// amounts and problem types are plain strings (a document that made them a
// union or interface{} would not compile here), and answers with members or
// enumerated values this version does not list still decode (the
// published schemas are open to additive change, docs/api.md
// "Compatibility").
var (
	_ string = writerapi.Transaction{}.Amount
	_ string = writerapi.TransactionCreate{}.Amount
	_ string = writerapi.Problem{}.Type
	_ string = writerapi.Transaction{}.Type
	_ string = writerapi.Tenant{}.Status
)

// stub answers every request with one canned response.
type stub struct {
	status      int
	contentType string
	body        string
}

func (s stub) Do(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: s.status, Header: http.Header{"Content-Type": {s.contentType}},
		Body: io.NopCloser(bytes.NewBufferString(s.body))}, nil
}

func TestGeneratedClient_ReadsAdditionsAndBothErrorBodies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := func(s stub) *writerapi.ClientWithResponses {
		c, err := writerapi.NewClientWithResponses("http://writer.invalid", writerapi.WithHTTPClient(s))
		require.NoError(t, err)
		return c
	}

	// A transaction with a member and a type value this version does not have.
	txn := `{"id":"01J1Z7ZZZZZZZZZZZZZZZZZZZZ","tenant":"acme","branch":"b1","type":"TRANSFER","amount":"12.5","category":"food",` +
		`"createdAt":"2026-01-31T12:00:00Z","updatedAt":"2026-01-31T12:00:00Z","version":1,"currency":"EUR"}`
	got, err := client(stub{200, "application/json", txn}).GetTransactionWithResponse(ctx, "acme", "b1", "01J1Z7ZZZZZZZZZZZZZZZZZZZZ")
	require.NoError(t, err)
	require.NotNil(t, got.JSON200)
	assert.Equal(t, "12.5", got.JSON200.Amount)
	assert.Equal(t, "TRANSFER", got.JSON200.Type)

	// The writer's problem and API Gateway's own answer to the same status.
	prob := `{"type":"https://github.com/ledger-dev/ledger/blob/main/docs/api.md#rate-limited","title":"Rate limited","status":429,"retryInMs":1000}`
	limited, err := client(stub{429, "application/problem+json", prob}).GetTransactionWithResponse(ctx, "acme", "b1", "x")
	require.NoError(t, err)
	require.NotNil(t, limited.ApplicationproblemJSON429)
	assert.Equal(t, "https://github.com/ledger-dev/ledger/blob/main/docs/api.md#rate-limited", limited.ApplicationproblemJSON429.Type)
	throttled, err := client(stub{429, "application/json", `{"message":"Too Many Requests"}`}).GetTransactionWithResponse(ctx, "acme", "b1", "x")
	require.NoError(t, err)
	require.NotNil(t, throttled.JSON429)
	assert.Equal(t, "Too Many Requests", throttled.JSON429.Message)
}
