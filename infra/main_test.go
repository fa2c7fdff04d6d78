package infra_test

import (
	"testing"

	"github.com/ledger-dev/ledger/infra/ddblocal"
)

func TestMain(m *testing.M) { ddblocal.Main(m) }
