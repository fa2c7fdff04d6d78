// Package infra holds what deploys and runs the ledger, not what it stores
// (that is package table): the AWS client configuration every binary and
// test shares (awsconfig.go), the CloudFormation/SAM template and its
// dashboards, the reproducible Lambda zips (lambdazip) and the pinned
// DynamoDB Local launcher (ddblocal).
package infra

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/ledger-dev/ledger/table"
)

// MaxIdleConnsPerHost is the idle connection pool size per host of the HTTP
// client LoadConfig builds. The SDK default (10) makes many goroutines
// talking to one DynamoDB endpoint open and close connections constantly.
const MaxIdleConnsPerHost = 64

// LocalRegion and LocalCredentials are what LocalConfig uses, and what
// LoadConfig falls back to when an endpoint is configured without a region
// or credentials. DynamoDB Local runs with -sharedDb, so their values do
// not matter; they only have to be present.
const (
	LocalRegion      = "us-east-1"
	localAccessKeyID = "local"
	localSecretKey   = "local"
)

// Environment variables that name an endpoint for the services this project
// uses (the SDK's "configured endpoints").
var endpointEnv = []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_DYNAMODB_STREAMS"}

// LoadConfig loads the AWS configuration the way every binary does:
// config.LoadDefaultConfig, so the standard environment (AWS_REGION,
// AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_DYNAMODB, credentials, profiles,
// AWS_CA_BUNDLE) applies, plus:
//
//   - the HTTP client is an awshttp.BuildableClient (a plain *http.Client
//     makes LoadDefaultConfig fail when AWS_CA_BUNDLE is set) with
//     MaxIdleConnsPerHost connections kept per host;
//   - when an endpoint is configured (AWS_ENDPOINT_URL or a
//     service-specific one, or config.WithBaseEndpoint) and no credentials
//     are (environment, shared profile, container or web identity, or an
//     opts credentials provider), static dummy credentials are used, and
//     region us-east-1 when no region is set either;
//   - DynamoDB clients made from the config with NewFromConfig skip the
//     response CRC32 check when their endpoint is local (http, localhost or
//     a loopback address): DynamoDB Local's error responses fail it
//     (table.LocalChecksums).
//
// opts are applied after these defaults and win over them. Errors come
// from reading the configuration, never from the network.
func LoadConfig(ctx context.Context, opts ...func(*config.LoadOptions) error) (aws.Config, error) {
	var given config.LoadOptions
	for _, opt := range opts {
		if err := opt(&given); err != nil {
			return aws.Config{}, fmt.Errorf("load aws config: %w", err)
		}
	}
	env, err := config.NewEnvConfig()
	if err != nil {
		return aws.Config{}, fmt.Errorf("load aws config: %w", err)
	}

	var defaults []func(*config.LoadOptions) error
	if given.HTTPClient == nil {
		defaults = append(defaults, config.WithHTTPClient(newHTTPClient()))
	}
	if configuredEndpoint(given, env) {
		defaults = append(defaults, config.WithDefaultRegion(LocalRegion))
		if !credentialsConfigured(ctx, given, env) {
			defaults = append(defaults, config.WithCredentialsProvider(localCredentials()))
		}
	}

	cfg, err := config.LoadDefaultConfig(ctx, append(defaults, opts...)...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load aws config: %w", err)
	}
	table.LocalChecksums(&cfg)
	return cfg, nil
}

// ConfigOption adjusts the configuration LocalConfig builds.
type ConfigOption func(*configOptions)

type configOptions struct {
	load     []func(*config.LoadOptions) error
	wrappers []func(http.RoundTripper) http.RoundTripper
}

// WithTransportWrapper wraps the HTTP transport of the configuration's
// client, e.g. to inject faults or record traffic in tests. wrap receives
// the SDK's transport and returns the round tripper the client uses; it is
// called once, when the configuration is built. With several wrappers, each
// wraps the result of the ones before it, so the last one sees requests
// first. See WrapTransport.
func WithTransportWrapper(wrap func(http.RoundTripper) http.RoundTripper) ConfigOption {
	return func(o *configOptions) { o.wrappers = append(o.wrappers, wrap) }
}

// WithLoadOptions passes options to config.LoadDefaultConfig, after
// LocalConfig's own (so they win).
func WithLoadOptions(opts ...func(*config.LoadOptions) error) ConfigOption {
	return func(o *configOptions) { o.load = append(o.load, opts...) }
}

// LocalConfig returns a configuration for a DynamoDB Local (or any test
// endpoint) at endpoint, e.g. "http://127.0.0.1:8000": region us-east-1,
// fixed dummy credentials, and DynamoDB and DynamoDB Streams clients
// pointed at endpoint even if AWS_ENDPOINT_URL_DYNAMODB says otherwise. It
// is LoadConfig underneath (same HTTP client, no response checksum check).
func LocalConfig(ctx context.Context, endpoint string, opts ...ConfigOption) (aws.Config, error) {
	var o configOptions
	for _, opt := range opts {
		opt(&o)
	}
	load := append([]func(*config.LoadOptions) error{
		config.WithRegion(LocalRegion),
		config.WithCredentialsProvider(localCredentials()),
		config.WithBaseEndpoint(endpoint),
		config.WithServiceOptions(func(_ string, so any) {
			switch so := so.(type) {
			case *dynamodb.Options:
				so.BaseEndpoint = aws.String(endpoint)
			case *dynamodbstreams.Options:
				so.BaseEndpoint = aws.String(endpoint)
			}
		}),
	}, o.load...)
	cfg, err := LoadConfig(ctx, load...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("local config for %s: %w", endpoint, err)
	}
	if len(o.wrappers) > 0 {
		if cfg, err = WrapTransport(cfg, o.wrappers...); err != nil {
			return aws.Config{}, fmt.Errorf("local config for %s: %w", endpoint, err)
		}
	}
	return cfg, nil
}

// WrapTransport returns a copy of cfg whose HTTP client sends requests
// through the wrappers (see WithTransportWrapper). cfg's client must be the
// *awshttp.BuildableClient that LoadConfig sets (its transport, with any
// AWS_CA_BUNDLE roots and pool settings, is what gets wrapped); anything
// else is an error. The new client keeps the buildable client's overall
// timeout and, like it, does not follow redirects; the SDK no longer
// adjusts it per service (connect and read timeouts of defaults modes).
func WrapTransport(cfg aws.Config, wrappers ...func(http.RoundTripper) http.RoundTripper) (aws.Config, error) {
	bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient)
	if !ok {
		return aws.Config{}, fmt.Errorf("wrap transport: http client is %T; want *awshttp.BuildableClient", cfg.HTTPClient)
	}
	var rt http.RoundTripper = bc.GetTransport()
	for _, wrap := range wrappers {
		rt = wrap(rt)
	}
	cfg.HTTPClient = &http.Client{
		Transport:     rt,
		Timeout:       bc.GetTimeout(),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return cfg, nil
}

// AttemptTimeout bounds one HTTP attempt of every AWS call: an answer that
// never comes (a dead peer, a lost response on a kept-alive connection)
// fails the attempt instead of holding the caller until the kernel gives up
// on the connection, minutes later. The SDK retries it like any timeout,
// and the consumers' guards and the poller's lease re-reads tell whether
// the write landed. Far above any DynamoDB call's time.
var AttemptTimeout = time.Minute

func newHTTPClient() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConnsPerHost = MaxIdleConnsPerHost
		tr.MaxIdleConns = max(tr.MaxIdleConns, MaxIdleConnsPerHost)
	}).WithTimeout(AttemptTimeout)
}

func localCredentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(localAccessKeyID, localSecretKey, "")
}

func configuredEndpoint(given config.LoadOptions, env config.EnvConfig) bool {
	if given.BaseEndpoint != "" {
		return true
	}
	if env.IgnoreConfiguredEndpoints != nil && *env.IgnoreConfiguredEndpoints {
		return false
	}
	for _, name := range endpointEnv {
		if os.Getenv(name) != "" {
			return true
		}
	}
	return false
}

// credentialsConfigured reports whether the SDK would find credentials
// without asking the network: from opts, the environment, or the shared
// profile in use. It never calls a credentials provider, so it never
// reaches for the EC2 instance metadata service.
func credentialsConfigured(ctx context.Context, given config.LoadOptions, env config.EnvConfig) bool {
	if given.Credentials != nil ||
		env.Credentials.HasKeys() ||
		env.WebIdentityTokenFilePath != "" ||
		env.ContainerCredentialsEndpoint != "" ||
		env.ContainerCredentialsRelativePath != "" {
		return true
	}
	profile := given.SharedConfigProfile
	if profile == "" {
		profile = env.SharedConfigProfile
	}
	if profile == "" {
		profile = config.DefaultSharedConfigProfile
	}
	sc, err := config.LoadSharedConfigProfile(ctx, profile, func(o *config.LoadSharedConfigOptions) {
		o.ConfigFiles = given.SharedConfigFiles
		if o.ConfigFiles == nil && env.SharedConfigFile != "" {
			o.ConfigFiles = []string{env.SharedConfigFile}
		}
		o.CredentialsFiles = given.SharedCredentialsFiles
		if o.CredentialsFiles == nil && env.SharedCredentialsFile != "" {
			o.CredentialsFiles = []string{env.SharedCredentialsFile}
		}
	})
	if err != nil {
		// No such profile or no files: nothing configured there. A broken
		// file is LoadDefaultConfig's to report.
		return false
	}
	return sc.Credentials.HasKeys() ||
		sc.SourceProfileName != "" ||
		sc.CredentialSource != "" ||
		sc.CredentialProcess != "" ||
		sc.WebIdentityTokenFile != "" ||
		sc.RoleARN != "" ||
		sc.SSOSessionName != "" ||
		sc.SSOAccountID != "" ||
		sc.SSOStartURL != "" ||
		sc.LoginSession != ""
}
