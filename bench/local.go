package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal"
)

// local is a DynamoDB Local started for one benchmark: its instance (Stop
// it when done), an SDK configuration and a client of it.
type local struct {
	in  *ddblocal.Instance
	cfg aws.Config
	db  *dynamodb.Client
}

// startLocal starts a DynamoDB Local from dir (empty: ddblocal's default)
// and records its version and Java's in m.
func startLocal(ctx context.Context, dir string, m *Machine) (*local, error) {
	in, err := ddblocal.Start(ctx, ddblocal.Options{Dir: dir})
	if err != nil {
		return nil, err
	}
	m.DynamoDBLocal, m.Java = dynamoDBLocalVersion(dir)
	cfg, err := infra.LocalConfig(ctx, in.Endpoint)
	if err != nil {
		_ = in.Stop()
		return nil, err
	}
	return &local{in: in, cfg: cfg, db: dynamodb.NewFromConfig(cfg)}, nil
}

// timedLog returns a printf to w that prefixes each line with the time and
// the benchmark's name.
func timedLog(w io.Writer, name string) func(format string, args ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(w, "%s %s: %s\n", time.Now().Format("15:04:05"), name, fmt.Sprintf(format, args...))
	}
}
