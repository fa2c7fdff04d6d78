package processor

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// AWS answers a single-item write of an item an ongoing transaction holds
// with TransactionConflictException, which the SDK does not retry: the
// write was refused before it applied, so the processor retries it (a
// checkpoint move, a run marker's put) and counts the retry with reason
// "conflict", where it used to fail the batch as a permanent error.
func TestClassifyErr_ItemConflictsAreRetried(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want errClass
	}{
		{"single-item write on a held item", &ddbtypes.TransactionConflictException{Message: aws.String("Transaction is ongoing for the item")}, classConflict},
		{"wrapped", fmt.Errorf("move the checkpoint: %w", &ddbtypes.TransactionConflictException{}), classConflict},
		{"from the wire, as the SDK decodes it", &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "UpdateItem",
			Err: &ddbtypes.TransactionConflictException{Message: aws.String("Transaction is ongoing for the item")}}, classConflict},
		{"a cancelled transaction is the commit's to interpret", &ddbtypes.TransactionCanceledException{}, classPermanent},
		{"a failed condition", &ddbtypes.ConditionalCheckFailedException{}, classPermanent},
		{"in progress", &ddbtypes.TransactionInProgressException{}, classServer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, classifyErr(tt.err))
		})
	}

	p := &Processor{cfg: Config{MaxAttempts: 5, BaseBackoff: time.Microsecond, MaxBackoff: time.Microsecond}, metrics: NewMetrics(nil)}
	calls := 0
	err := p.retry(context.Background(), "UpdateItem", func(context.Context) error {
		if calls++; calls <= 2 {
			return &ddbtypes.TransactionConflictException{}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 3, calls)
	assert.Equal(t, 2.0, testutil.ToFloat64(p.metrics.Retries.WithLabelValues("UpdateItem", "conflict")))

	calls = 0
	err = p.retry(context.Background(), "UpdateItem", func(context.Context) error { calls++; return &ddbtypes.TransactionConflictException{} })
	var tce *ddbtypes.TransactionConflictException
	assert.True(t, errors.As(err, &tce), "the budget spent, the conflict is returned: %v", err)
	assert.Equal(t, 5, calls)
}

// A cancelled transaction's reasons, read the same way by every committer:
// each throttle code is one throttle (the item's partition or the table's
// capacity), and a guard-alone transaction (the legacy fence, the abandon)
// is retried for throttles and conflicts only while no reason is one a
// retry cannot mend.
func TestCancelReasons(t *testing.T) {
	tce := func(codes ...string) *ddbtypes.TransactionCanceledException {
		e := &ddbtypes.TransactionCanceledException{}
		for _, c := range codes {
			e.CancellationReasons = append(e.CancellationReasons, ddbtypes.CancellationReason{Code: aws.String(c)})
		}
		return e
	}
	tests := []struct {
		name                     string
		codes                    []string
		throttle, conflict, fail bool
	}{
		{"every reason None", []string{"None", "None"}, false, false, false},
		{"no reasons", nil, false, false, false},
		{"a conflict", []string{"None", "TransactionConflict"}, false, true, false},
		{"ThrottlingError", []string{"ThrottlingError", "None"}, true, false, false},
		{"ProvisionedThroughputExceeded", []string{"ProvisionedThroughputExceeded"}, true, false, false},
		{"RequestLimitExceeded", []string{"RequestLimitExceeded"}, true, false, false},
		{"a condition failed", []string{"ConditionalCheckFailed", "None"}, false, false, true},
		{"a throttle after a condition failed is still final", []string{"ConditionalCheckFailed", "ThrottlingError"}, true, false, true},
		{"a validation beside a conflict", []string{"TransactionConflict", "ValidationError"}, false, true, true},
		{"an unknown code", []string{"ItemCollectionSizeLimitExceeded"}, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			throttle, conflict, final := cancelReasons(tce(tt.codes...))
			assert.Equal(t, []bool{tt.throttle, tt.conflict, tt.fail}, []bool{throttle, conflict, final})
		})
	}
	for _, c := range []string{"ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"} {
		assert.Equal(t, reasonThrottled, reasonCode(ddbtypes.CancellationReason{Code: aws.String(c)}), c)
	}
	assert.Equal(t, "TransactionConflict", reasonCode(ddbtypes.CancellationReason{Code: aws.String("TransactionConflict")}))
	assert.Equal(t, "", reasonCode(ddbtypes.CancellationReason{}))
}
