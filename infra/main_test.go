package infra_test

import (
	"testing"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }
