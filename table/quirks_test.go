package table_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/table"
)

func TestIsLocalEndpoint(t *testing.T) {
	for url, want := range map[string]bool{
		"http://127.0.0.1:8000":                                true,
		"http://localhost:8000":                                true,
		"https://localhost:8443":                               true,
		"https://[::1]:8443":                                   true,
		"http://dynamodb-local:8000":                           true,
		"https://dynamodb.us-east-1.amazonaws.com":             false,
		"https://vpce-1.dynamodb.eu-west-1.vpce.amazonaws.com": false,
		"::not a url":                                          false,
	} {
		assert.Equal(t, want, table.IsLocalEndpoint(url), url)
	}
}

func TestFixEmptyMapImage_TagsUntaggedEmptyMapsAtAnyDepth(t *testing.T) {
	// DynamoDB Local's stream image of an item with empty maps.
	in := `{"PK":{"S":"X"},"a":{},"n":{"M":{"inner":{},"k":{"N":"1.10"}}},"l":{"L":[{},{"S":"y"},{"M":{"e":{}}}]},"e":{"M":{}},"b":{"B":"AAEqQQ=="}}`
	want := `{"PK":{"S":"X"},"a":{"M":{}},"n":{"M":{"inner":{"M":{}},"k":{"N":"1.10"}}},"l":{"L":[{"M":{}},{"S":"y"},{"M":{"e":{"M":{}}}}]},"e":{"M":{}},"b":{"B":"AAEqQQ=="}}`
	got, err := table.FixEmptyMapImage([]byte(in))
	require.NoError(t, err)
	assert.JSONEq(t, want, string(got))
}
