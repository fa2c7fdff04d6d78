package processor

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// Error classes. Every error a DynamoDB call returns is put in exactly one.
type errClass int

const (
	classPermanent errClass = iota // a bug or a bad request: fail the batch now
	classThrottle                  // throttled: back off and retry
	classServer                    // 5xx, in-progress, idempotency mismatch: outcome unknown, retry (the guard decides)
	classNetwork                   // timeouts, resets, a lost answer: outcome unknown, retry
	classCanceled                  // the caller's context ended
	classConflict                  // a single-item write met a transaction holding its item: it did not land, retry
)

func (c errClass) String() string {
	return [...]string{"permanent", "throttle", "server", "network", "canceled", "conflict"}[c]
}

// reasonThrottled is the spelling reasonCode gives every throttle among a
// cancelled transaction's reasons (ThrottlingError,
// ProvisionedThroughputExceeded, RequestLimitExceeded: the item's
// partition or the table's capacity, not the item's state), so that a
// switch on the code names the throttles once.
const reasonThrottled = "ThrottlingError"

// reasonCode is the code of a cancellation reason of a TransactWriteItems,
// every throttle's spelled reasonThrottled.
func reasonCode(r ddbtypes.CancellationReason) string {
	switch c := aws.ToString(r.Code); c {
	case "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
		return reasonThrottled
	default:
		return c
	}
}

// cancelReasons sums up a cancelled transaction of the guard alone (the
// legacy fence, the abandon): whether any item was throttled, met another
// transaction, or was refused for a reason a retry cannot mend (its
// condition, a validation, anything else). Every reason "None" (or none
// given) is all three false.
func cancelReasons(tce *ddbtypes.TransactionCanceledException) (throttle, conflict, final bool) {
	for _, r := range tce.CancellationReasons {
		switch reasonCode(r) {
		case "", "None":
		case "TransactionConflict":
			conflict = true
		case reasonThrottled:
			throttle = true
		default:
			final = true
		}
	}
	return throttle, conflict, final
}

func classifyErr(err error) errClass {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return classCanceled
	}
	var rae *raiseError
	if errors.As(err, &rae) {
		// The raise of the protocol before a write failed, retried
		// already: the write was not sent (beforeFence).
		return classPermanent
	}
	var pte *ddbtypes.ProvisionedThroughputExceededException
	var rle *ddbtypes.RequestLimitExceeded
	var tipe *ddbtypes.TransactionInProgressException
	var ipme *ddbtypes.IdempotentParameterMismatchException
	var ise *ddbtypes.InternalServerError
	var tce *ddbtypes.TransactionConflictException
	switch {
	case errors.As(err, &pte), errors.As(err, &rle):
		return classThrottle
	case errors.As(err, &tce):
		// A PutItem, UpdateItem or DeleteItem of an item an ongoing
		// TransactWriteItems holds (a commit's checkpoint claim, while
		// the Lambda moves the checkpoint outside a commit): refused
		// before it was applied, and not retried by the SDK.
		return classConflict
	case errors.As(err, &tipe), errors.As(err, &ipme), errors.As(err, &ise):
		return classServer
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "ThrottlingException", "Throttling", "ThrottledException", "LimitExceededException":
			return classThrottle
		case "ServiceUnavailable", "InternalFailure", "InternalServerError":
			return classServer
		}
		var re interface{ HTTPStatusCode() int }
		if errors.As(err, &re) && re.HTTPStatusCode() >= 500 {
			return classServer
		}
		if ae.ErrorFault() == smithy.FaultServer {
			return classServer
		}
		return classPermanent
	}
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) && re.HTTPStatusCode() >= 500 {
		return classServer
	}
	var ne net.Error
	var me *retry.MaxAttemptsError
	if errors.As(err, &ne) || errors.As(err, &me) || isTransportError(err) {
		return classNetwork
	}
	return classPermanent
}

// isTransportError reports errors the SDK returns when a request got no
// (complete) answer: the write may or may not have landed.
func isTransportError(err error) bool {
	var re interface{ RetryableError() bool }
	if errors.As(err, &re) && re.RetryableError() {
		return true
	}
	var oe *smithy.OperationError
	if errors.As(err, &oe) {
		var rse interface{ HTTPStatusCode() int }
		return !errors.As(err, &rse)
	}
	return false
}

// backoff returns the wait before retry attempt n (n ≥ 1): exponential from
// BaseBackoff, capped at MaxBackoff, with full jitter.
func (p *Processor) backoff(n int) time.Duration {
	d := p.cfg.BaseBackoff << min(n-1, 20)
	if d <= 0 || d > p.cfg.MaxBackoff {
		d = p.cfg.MaxBackoff
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retry runs fn until it succeeds, fails permanently, or MaxAttempts is
// spent, backing off between attempts. Only idempotent calls go through it.
func (p *Processor) retry(ctx context.Context, op string, fn func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		class := classifyErr(err)
		if class == classPermanent || class == classCanceled || attempt >= p.cfg.MaxAttempts {
			return err
		}
		p.countRetry(op, class)
		if err := sleep(ctx, p.backoff(attempt)); err != nil {
			return err
		}
	}
}

func (p *Processor) countRetry(op string, class errClass) {
	if class == classThrottle {
		p.metrics.Throttles.WithLabelValues(op).Inc()
	}
	p.metrics.Retries.WithLabelValues(op, class.String()).Inc()
}
