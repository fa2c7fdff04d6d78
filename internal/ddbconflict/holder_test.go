package ddbconflict_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ddbconflict"
)

// The refusal that releases a Holder is answered only once the holding
// transaction has freed its items, however late its goroutine runs after
// the release: the consumer's next attempt, sent at once, goes through,
// so the count of refusals is exact (a loaded CI run once counted one
// more when the answer overtook the holder's return).
func TestHolder_TheReleasingRefusalIsAnsweredOnceTheItemsAreFree(t *testing.T) {
	plain := ddbtest.Client(t)
	table := ddbtest.NewTable(t, plain)
	ctx := context.Background()

	const refusals = 2
	hold := ddbconflict.NewHolder("TransactWriteItems", refusals)
	tr := &ddbconflict.Transport{}
	hold.Install(tr)
	late := tr.Hold
	tr.Hold = func(ctx context.Context, keys []string) {
		late(ctx, keys)
		time.Sleep(300 * time.Millisecond) // the holder's goroutine, scheduled late
	}
	other := emulated(t, tr)
	consumer := ddbtest.Client(t, infra.WithTransportWrapper(func(http.RoundTripper) http.RoundTripper { return hold.Counting(tr) }))

	odone := make(chan error, 1)
	hold.Arm()
	go func() {
		_, err := other.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: ddbconflict.AlwaysHolds(table, key("h", "X"))})
		odone <- err
	}()
	<-hold.Held()

	refused := 0
	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, 10, "the consumer's write never went through")
		_, err := consumer.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{put(table, "h")}},
			func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
		if err == nil {
			break
		}
		assert.Equal(t, []string{"TransactionConflict"}, reasons(t, err))
		refused++
	}
	require.NoError(t, <-odone)
	assert.Equal(t, refusals, refused, "refusals before the write went through")
	cancelled, _ := tr.Stats()
	assert.Equal(t, int64(refusals), cancelled)
}
