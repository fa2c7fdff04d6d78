package writer

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// capacity is what one request's DynamoDB calls consumed, read and write
// capacity units, which the tenant budget charges (budget.go).
type capacity struct {
	mu          sync.Mutex
	read, write float64
}

func (c *capacity) add(read, write float64) {
	c.mu.Lock()
	c.read += read
	c.write += write
	c.mu.Unlock()
}

func (c *capacity) units() (read, write float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.read, c.write
}

type capacityKey struct{}

func capacityOf(ctx context.Context) *capacity {
	c, _ := ctx.Value(capacityKey{}).(*capacity)
	return c
}

// meteredDynamoDB asks DynamoDB for the consumed capacity of every call
// made with a capacity in its context (a request the tenant budget
// admitted) and adds it there. Reads count as read units, writes as write
// units. A write that fails (a condition, a cancelled transaction) consumes
// capacity but reports none: it is estimated as one write unit per item
// (two per item of a transaction), so that writes a tenant makes fail on
// purpose are not free. Calls without a capacity pass through unchanged.
type meteredDynamoDB struct{ next DynamoDB }

var _ DynamoDB = meteredDynamoDB{}

func total(cc *ddbtypes.ConsumedCapacity) float64 {
	if cc == nil {
		return 0
	}
	return aws.ToFloat64(cc.CapacityUnits)
}

func (m meteredDynamoDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c := capacityOf(ctx)
	if c == nil {
		return m.next.GetItem(ctx, in, opts...)
	}
	cp := *in
	cp.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
	out, err := m.next.GetItem(ctx, &cp, opts...)
	if err == nil {
		c.add(total(out.ConsumedCapacity), 0)
	}
	return out, err
}

func (m meteredDynamoDB) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c := capacityOf(ctx)
	if c == nil {
		return m.next.Query(ctx, in, opts...)
	}
	cp := *in
	cp.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
	out, err := m.next.Query(ctx, &cp, opts...)
	if err == nil {
		c.add(total(out.ConsumedCapacity), 0)
	}
	return out, err
}

func (m meteredDynamoDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c := capacityOf(ctx)
	if c == nil {
		return m.next.PutItem(ctx, in, opts...)
	}
	cp := *in
	cp.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
	out, err := m.next.PutItem(ctx, &cp, opts...)
	if err != nil {
		c.add(0, 1)
	} else {
		c.add(0, total(out.ConsumedCapacity))
	}
	return out, err
}

func (m meteredDynamoDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	c := capacityOf(ctx)
	if c == nil {
		return m.next.BatchGetItem(ctx, in, opts...)
	}
	cp := *in
	cp.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
	out, err := m.next.BatchGetItem(ctx, &cp, opts...)
	if err == nil {
		for i := range out.ConsumedCapacity {
			c.add(total(&out.ConsumedCapacity[i]), 0)
		}
	}
	return out, err
}

func (m meteredDynamoDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	c := capacityOf(ctx)
	if c == nil {
		return m.next.DeleteItem(ctx, in, opts...)
	}
	cp := *in
	cp.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
	out, err := m.next.DeleteItem(ctx, &cp, opts...)
	if err != nil {
		c.add(0, 1)
	} else {
		c.add(0, total(out.ConsumedCapacity))
	}
	return out, err
}

func (m meteredDynamoDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c := capacityOf(ctx)
	if c == nil {
		return m.next.UpdateItem(ctx, in, opts...)
	}
	cp := *in
	cp.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
	out, err := m.next.UpdateItem(ctx, &cp, opts...)
	if err != nil {
		c.add(0, 1)
	} else {
		c.add(0, total(out.ConsumedCapacity))
	}
	return out, err
}

func (m meteredDynamoDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c := capacityOf(ctx)
	if c == nil {
		return m.next.TransactWriteItems(ctx, in, opts...)
	}
	cp := *in
	cp.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
	out, err := m.next.TransactWriteItems(ctx, &cp, opts...)
	if err != nil {
		c.add(0, 2*float64(len(in.TransactItems)))
		return out, err
	}
	var units float64
	for i := range out.ConsumedCapacity {
		units += total(&out.ConsumedCapacity[i])
	}
	c.add(0, units)
	return out, err
}
