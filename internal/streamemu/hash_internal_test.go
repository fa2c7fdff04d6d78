package streamemu

import (
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
)

// Keys that differ only at their end (a tenant's 32 roll-up lanes, a
// branch's numbered siblings) spread over the shards like any others: with
// FNV-1a alone all 32 lanes fell within 2^-24 of the hash space, in one
// shard of 8 (the bound is loose, the spread of a random throw; the hash is
// fixed, so the test is deterministic).
func TestHashKey_KeysDifferingAtTheEndSpreadOverTheShards(t *testing.T) {
	s := &Stream{cfg: Config{PartitionKey: "PK"}}
	for _, form := range []string{"TENANT#acme#ROLLUPLANE#%d", "TENANT#acme#BRANCH#b%d#TRANSACTION", "EMU#item-%d"} {
		perShard := make([]int, 8) // 8 shards dividing the space evenly
		for i := range 32 {
			r := types.Record{Dynamodb: &types.StreamRecord{Keys: map[string]types.AttributeValue{
				"PK": &types.AttributeValueMemberS{Value: fmt.Sprintf(form, i)},
			}}}
			perShard[s.hashKey(r)>>61]++
		}
		reached := 0
		for sh, n := range perShard {
			if n > 0 {
				reached++
			}
			assert.LessOrEqual(t, n, 10, "%s: shard %d of 8 took %d of 32 keys (%v)", form, sh, n, perShard)
		}
		// 32 keys thrown at random at 8 shards reach 7 or 8 of them nine
		// times in ten; the fixed hash reaches 7 for the lanes.
		assert.GreaterOrEqual(t, reached, 6, "%s: 32 keys reached %d of 8 shards (%v)", form, reached, perShard)
	}
}
