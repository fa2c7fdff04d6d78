package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ledger-dev/ledger/writer"
)

// The HS256 secret from AWS Secrets Manager (--jwt-secret-arn): read at
// start (the writer does not start without it), kept in memory, and read
// again every --secret-refresh, so that neither the function configuration
// nor the environment holds it and a rotation needs no deployment. Tokens
// verify with the AWSCURRENT version or, during a rotation, the AWSPREVIOUS
// one. A failed refresh keeps the secrets read last (logged, counted).

// secretsAPI is the part of the Secrets Manager API the writer calls.
type secretsAPI interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

type secretCache struct {
	api     secretsAPI
	id      string
	logger  *slog.Logger
	reads   *prometheus.CounterVec // outcome: ok, error
	timeout time.Duration

	mu      sync.RWMutex
	secrets [][]byte // current first, then previous
}

// secretValue reads one version stage of the secret: nil when that stage
// does not exist (AWSPREVIOUS before the first rotation).
func (c *secretCache) secretValue(ctx context.Context, stage string) ([]byte, error) {
	out, err := c.api.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: &c.id, VersionStage: aws.String(stage)})
	var nf *smtypes.ResourceNotFoundException
	switch {
	case errors.As(err, &nf) && stage != "AWSCURRENT":
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("secrets manager: get %s of %s: %w", stage, c.id, err)
	case out.SecretString != nil:
		return []byte(*out.SecretString), nil
	default:
		return out.SecretBinary, nil
	}
}

// refresh reads the current and previous secret; on failure the secrets
// read last stay in use.
func (c *secretCache) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err := func() error {
		cur, err := c.secretValue(ctx, "AWSCURRENT")
		if err != nil {
			return err
		}
		if len(cur) < writer.MinSecretLength {
			return fmt.Errorf("secrets manager: the secret %s has %d bytes; it needs at least %d", c.id, len(cur), writer.MinSecretLength)
		}
		prev, err := c.secretValue(ctx, "AWSPREVIOUS")
		if err != nil {
			return err
		}
		secrets := [][]byte{cur}
		if len(prev) >= writer.MinSecretLength {
			secrets = append(secrets, prev)
		}
		c.mu.Lock()
		c.secrets = secrets
		c.mu.Unlock()
		return nil
	}()
	if err != nil {
		c.reads.WithLabelValues("error").Inc()
		return err
	}
	c.reads.WithLabelValues("ok").Inc()
	return nil
}

// current returns the secrets tokens may be signed with.
func (c *secretCache) current() [][]byte {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.secrets
}

// run refreshes every interval until ctx is done.
func (c *secretCache) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.refresh(ctx); err != nil && ctx.Err() == nil {
				c.logger.Error("refreshing the JWT secret failed; the secrets read last stay in use", "error", err.Error())
			}
		}
	}
}
