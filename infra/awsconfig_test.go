package infra_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/smithy-go/logging"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
)

// cleanAWSEnv removes every AWS setting the SDK would read and points the
// shared files at nothing, so a test sees only what it sets. Instance
// metadata is switched off so nothing can reach for it.
func cleanAWSEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "AWS_") {
			t.Setenv(name, "") // restores the old value after the test
			require.NoError(t, os.Unsetenv(name))
		}
	}
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

func TestLoadConfig_EndpointFillsInLocalCredentialsAndRegion(t *testing.T) {
	for _, tc := range []struct {
		name       string
		env        map[string]string
		creds      string // credentials file contents
		wantKey    string
		wantRegion string
	}{
		{
			name:       "endpoint alone",
			env:        map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:8000"},
			wantKey:    "local",
			wantRegion: "us-east-1",
		},
		{
			name:       "service endpoint alone",
			env:        map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": "http://localhost:8000"},
			wantKey:    "local",
			wantRegion: "us-east-1",
		},
		{
			name:       "region kept",
			env:        map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:8000", "AWS_REGION": "eu-west-1"},
			wantKey:    "local",
			wantRegion: "eu-west-1",
		},
		{
			name:       "environment credentials kept",
			env:        map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:8000", "AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "secret"},
			wantKey:    "AKIDENV",
			wantRegion: "us-east-1",
		},
		{
			name:       "profile credentials kept",
			env:        map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:8000", "AWS_PROFILE": "dev"},
			creds:      "[dev]\naws_access_key_id = AKIDFILE\naws_secret_access_key = secret\n",
			wantKey:    "AKIDFILE",
			wantRegion: "us-east-1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanAWSEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			if tc.creds != "" {
				require.NoError(t, os.WriteFile(os.Getenv("AWS_SHARED_CREDENTIALS_FILE"), []byte(tc.creds), 0o600))
			}
			cfg, err := infra.LoadConfig(t.Context())
			require.NoError(t, err)
			assert.Equal(t, tc.wantRegion, cfg.Region)
			creds, err := cfg.Credentials.Retrieve(t.Context())
			require.NoError(t, err)
			assert.Equal(t, tc.wantKey, creds.AccessKeyID)
		})
	}
}

func TestLoadConfig_NoEndpointAddsNoRegion(t *testing.T) {
	cleanAWSEnv(t)
	cfg, err := infra.LoadConfig(t.Context())
	require.NoError(t, err)
	assert.Empty(t, cfg.Region, "a missing region on AWS must stay an error, not become us-east-1")
	assert.Nil(t, cfg.BaseEndpoint)
}

func TestLoadConfig_OptionsWinOverDefaults(t *testing.T) {
	cleanAWSEnv(t)
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:8000")
	cfg, err := infra.LoadConfig(t.Context(), config.WithRegion("ap-south-1"))
	require.NoError(t, err)
	assert.Equal(t, "ap-south-1", cfg.Region)
}

func TestLoadConfig_ChecksumSkippedOnlyForLocalEndpoints(t *testing.T) {
	for _, tc := range []struct {
		env  string
		url  string
		skip bool
	}{
		{"AWS_ENDPOINT_URL", "http://127.0.0.1:8000", true},
		{"AWS_ENDPOINT_URL", "http://dynamodb-local:8000", true},
		{"AWS_ENDPOINT_URL_DYNAMODB", "https://localhost:8443", true},
		{"AWS_ENDPOINT_URL", "https://dynamodb.eu-west-1.amazonaws.com", false},
		{"", "", false},
	} {
		t.Run(tc.env+"="+tc.url, func(t *testing.T) {
			cleanAWSEnv(t)
			if tc.env != "" {
				t.Setenv(tc.env, tc.url)
			}
			t.Setenv("AWS_REGION", "eu-west-1")
			cfg, err := infra.LoadConfig(t.Context())
			require.NoError(t, err)
			opts := dynamodb.NewFromConfig(cfg).Options()
			assert.Equal(t, tc.skip, opts.DisableValidateResponseChecksum)
		})
	}
}

// tlsServer is an HTTPS server whose certificate only a client trusting
// its own CA accepts; caBundle is that CA as a PEM file.
func tlsServer(t *testing.T) (srv *httptest.Server, caBundle string) {
	t.Helper()
	srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	caBundle = filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	require.NoError(t, os.WriteFile(caBundle, pemBytes, 0o600))
	return srv, caBundle
}

func TestLoadConfig_HonoursCABundleWithABiggerPool(t *testing.T) {
	cleanAWSEnv(t)
	srv, ca := tlsServer(t)
	t.Setenv("AWS_CA_BUNDLE", ca)

	cfg, err := infra.LoadConfig(t.Context())
	require.NoError(t, err)
	bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient)
	require.True(t, ok, "http client is %T; want *awshttp.BuildableClient", cfg.HTTPClient)
	assert.Equal(t, infra.MaxIdleConnsPerHost, bc.GetTransport().MaxIdleConnsPerHost)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := cfg.HTTPClient.Do(req)
	require.NoError(t, err, "the CA bundle's certificate must be trusted")
	resp.Body.Close()
}

func TestLocalConfig_WrappedTransportKeepsCABundle(t *testing.T) {
	cleanAWSEnv(t)
	srv, ca := tlsServer(t)
	t.Setenv("AWS_CA_BUNDLE", ca)
	var calls atomic.Int32
	cfg, err := infra.LocalConfig(t.Context(), srv.URL, infra.WithTransportWrapper(countCalls(&calls)))
	require.NoError(t, err)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := cfg.HTTPClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, int32(1), calls.Load())
}

func TestLocalConfig_PointsBothClientsAtTheEndpoint(t *testing.T) {
	cleanAWSEnv(t)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:1")
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", "http://127.0.0.1:2")
	t.Setenv("AWS_REGION", "eu-west-1")
	cfg, err := infra.LocalConfig(t.Context(), "http://127.0.0.1:8000")
	require.NoError(t, err)
	assert.Equal(t, "us-east-1", cfg.Region)
	assert.Equal(t, "http://127.0.0.1:8000", aws.ToString(dynamodb.NewFromConfig(cfg).Options().BaseEndpoint))
	assert.Equal(t, "http://127.0.0.1:8000", aws.ToString(dynamodbstreams.NewFromConfig(cfg).Options().BaseEndpoint))
	creds, err := cfg.Credentials.Retrieve(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "local", creds.AccessKeyID)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func countCalls(n *atomic.Int32) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			n.Add(1)
			return next.RoundTrip(r)
		})
	}
}

func TestWithTransportWrapper_InjectedResetIsRetriedBySDK(t *testing.T) {
	var attempts atomic.Int32
	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	resetFirst := func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			note("inner")
			if attempts.Add(1) == 1 {
				return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
			}
			return next.RoundTrip(r)
		})
	}
	outer := func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			note("outer")
			return next.RoundTrip(r)
		})
	}
	client := ddbtest.Client(t, infra.WithTransportWrapper(resetFirst), infra.WithTransportWrapper(outer))

	_, err := client.ListTables(t.Context(), &dynamodb.ListTablesInput{})
	require.NoError(t, err, "the SDK retries a connection reset")
	assert.Equal(t, int32(2), attempts.Load())
	assert.Equal(t, []string{"outer", "inner", "outer", "inner"}, order, "the last wrapper given sees requests first")
}

// TestLocalConfig_ErrorResponsesLogNoChecksumWarning: DynamoDB Local's
// error responses fail the SDK's CRC32 check, which then logs a warning on
// every error; LocalConfig turns the check off.
func TestLocalConfig_ErrorResponsesLogNoChecksumWarning(t *testing.T) {
	for _, tc := range []struct {
		name        string
		forceCheck  bool
		wantWarning bool
	}{
		{"as configured", false, false},
		{"check forced back on", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var logs bytes.Buffer
			logger := logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintf(&logs, "%s "+format+"\n", append([]any{c}, v...)...)
			})
			client := dynamodb.NewFromConfig(ddbtest.Config(t, infra.WithLoadOptions(config.WithLogger(logger))), func(o *dynamodb.Options) {
				if tc.forceCheck {
					o.DisableValidateResponseChecksum = false
				}
			})
			table := ddbtest.NewTable(t, client)

			_, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{
				TableName:           aws.String(table),
				Item:                map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "SETTINGS#APP"}, "SK": &types.AttributeValueMemberS{Value: "FLAGS#V1"}},
				ConditionExpression: aws.String("attribute_not_exists(PK)"),
			})
			var ccf *types.ConditionalCheckFailedException
			require.ErrorAs(t, err, &ccf)

			mu.Lock()
			defer mu.Unlock()
			if tc.wantWarning {
				assert.Contains(t, logs.String(), "did not match expected checksum")
			} else {
				assert.NotContains(t, logs.String(), "checksum")
			}
		})
	}
}

// TestLoadConfig_AnAnswerThatNeverComesFailsTheAttempt: a server that
// accepts the request and never answers does not hold the caller: each
// attempt ends at infra.AttemptTimeout and the call fails.
func TestLoadConfig_AnAnswerThatNeverComesFailsTheAttempt(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	saved := infra.AttemptTimeout
	infra.AttemptTimeout = 200 * time.Millisecond
	defer func() { infra.AttemptTimeout = saved }()
	cfg, err := infra.LocalConfig(context.Background(), srv.URL)
	require.NoError(t, err)
	c := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.RetryMaxAttempts = 2 })
	done := make(chan error, 1)
	go func() {
		_, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("t"),
			Key: map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "a"}, "SK": &types.AttributeValueMemberS{Value: "b"}}})
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err, "no answer is no success")
	case <-time.After(2 * time.Minute):
		t.Fatal("the call still hangs: attempts have no timeout")
	}
}
