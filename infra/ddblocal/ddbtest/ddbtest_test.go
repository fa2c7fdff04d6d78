package ddbtest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
)

func TestTableName_IsValidAndUnique(t *testing.T) {
	t.Run("odd/chars: and spaces ünïcode", func(t *testing.T) {
		a, b := ddbtest.TableName(t), ddbtest.TableName(t)
		assert.NotEqual(t, a, b)
		for _, n := range []string{a, b} {
			assert.Regexp(t, `^[A-Za-z0-9_.-]{3,255}$`, n)
		}
	})
}

func TestEndpoint_UsesTheConfiguredEndpointWithoutStartingAnything(t *testing.T) {
	t.Setenv(ddbtest.EnvTestEndpoint, "http://127.0.0.1:1")
	assert.Equal(t, "http://127.0.0.1:1", ddbtest.Endpoint(t))
}
