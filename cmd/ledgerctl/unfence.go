package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

const unfenceHelp = `Puts the table back in the layouts of protocol 3, for a rollback of the
consumers below protocol 4 (docs/exactly-once.md, second review, F-b, and
"F as built (session 25)"; runbook, "Rolling back below protocol 4"). With
every consumer stopped: every checkpoint of the coordination table fenced by
protocol 4 back to sequenceNumber = pos (pos and countedTo removed), every
fenced report head of the ledger table back to transactionCount = txCount
(txCount removed), each on condition that it is still as read; then the
flags item's protocol from 4 back to 3, last (a run cut short leaves it at 4:
run it again). Positions and figures are kept: the reports reconcile as
before.

It refuses, writing nothing, while a lease of any stream is live (a poller
holds a shard until its leaseExpiry), and when a checkpoint or the flags name
another protocol than 4 or 3. It cannot see a Lambda: disable the function's
event source mapping and let running invocations end first. Idempotent: items
in the old layout are left alone, and a second run finds nothing to do. A
consumer of protocol 4 started afterwards raises the protocol and fences
again as it commits. Every branch's fencedAt (its rebase after the fence) is
removed too: counted repairs wait for a new rebase. Refused while a branch is
being rebased (its rebase would fence its heads again): let it end or abandon it.
Exit status: 0 done or nothing to do, 2 refused or error.`

func (e *environment) unfence(ctx context.Context, args []string) int {
	fs := e.flags("unfence", unfenceHelp)
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return e.fail(fmt.Errorf("unfence: unexpected argument %q", fs.Arg(0)))
	}
	c, err := e.dynamo(ctx)
	if err != nil {
		return e.fail(err)
	}
	flags, err := table.GetFlags(ctx, c, e.table)
	if err != nil {
		return e.fail(fmt.Errorf("unfence: %w", err))
	}
	if err := flags.ProtocolAbove(table.Protocol); err != nil {
		return e.fail(fmt.Errorf("unfence: %w: nothing written", err))
	}

	// Read everything first; write only when nothing refuses.
	now := time.Now()
	var live, foreign, rebasing []string
	type fenced struct {
		key aggregates.Key
		pos string
	}
	var cps []fenced
	var rebased []aggregates.Key // applied items holding fencedAt
	err = scanAll(ctx, c, &dynamodb.ScanInput{TableName: aws.String(e.coordination), ConsistentRead: aws.Bool(true)}, func(item map[string]types.AttributeValue) {
		et, _ := table.String(item, table.AttrEntityType)
		shard, _ := table.String(item, table.AttrShardID)
		switch et {
		case aggregates.EntityLease:
			owner, _ := table.String(item, table.AttrLeaseOwner)
			exp, _ := table.String(item, table.AttrLeaseExpiry)
			until, perr := time.Parse(time.RFC3339Nano, exp)
			if owner != "" && (perr != nil || until.After(now)) {
				live = append(live, fmt.Sprintf("%s (owner %s, until %s)", shard, owner, orDash(exp)))
			}
		case aggregates.EntityApplied:
			if _, ok := item[table.AttrFencedAt]; ok {
				rebased = append(rebased, table.KeyOf(item))
			}
			if id, ok := table.String(item, table.AttrRebasing); ok && id != "" {
				// A rebase fences heads again at B4 and sets fencedAt at
				// B5 (review of step B, S26-B6).
				rebasing = append(rebasing, fmt.Sprintf("%s (rebase %s)", table.KeyOf(item).PK, id))
			}
		case aggregates.EntityCheckpoint:
			cp, _ := table.DecodeCheckpoint(shard, item)
			switch {
			case cp.Foreign():
				foreign = append(foreign, fmt.Sprintf("%s (protocol %d)", shard, cp.Fence))
			case cp.Fence == table.Protocol:
				cps = append(cps, fenced{key: table.KeyOf(item), pos: cp.Pos})
			}
		}
	})
	if err != nil {
		return e.fail(fmt.Errorf("unfence: read %s: %w", e.coordination, err))
	}
	sort.Strings(live)
	sort.Strings(foreign)
	sort.Strings(rebasing)
	switch {
	case len(rebasing) > 0:
		return e.fail(fmt.Errorf("unfence: %d branches are being rebased (a rebase fences their heads again): %s: let each end, or abandon it (reconcile --repair --rebase --abandon ID), then run again: nothing written", len(rebasing), strings.Join(rebasing, ", ")))
	case len(live) > 0:
		return e.fail(fmt.Errorf("unfence: %d leases are live, a poller is running (stop every consumer first): %s: nothing written", len(live), strings.Join(live, ", ")))
	case len(foreign) > 0:
		return e.fail(fmt.Errorf("unfence: checkpoints fenced by another protocol than %d: %s: nothing written", table.Protocol, strings.Join(foreign, ", ")))
	}
	var heads []aggregates.Key
	err = scanAll(ctx, c, &dynamodb.ScanInput{
		TableName: aws.String(e.table), ConsistentRead: aws.Bool(true),
		FilterExpression:          aws.String("#n = :fv"),
		ProjectionExpression:      aws.String("#pk, #sk"),
		ExpressionAttributeNames:  map[string]string{"#n": table.AttrTransactionCount, "#pk": table.AttrPK, "#sk": table.AttrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":fv": table.S(table.HeadFence)},
	}, func(item map[string]types.AttributeValue) { heads = append(heads, table.KeyOf(item)) })
	if err != nil {
		return e.fail(fmt.Errorf("unfence: read %s: %w", e.table, err))
	}

	var ccf *types.ConditionalCheckFailedException
	done := 0
	for _, cp := range cps {
		_, err := c.UpdateItem(ctx, table.UnfenceCheckpoint(e.coordination, cp.key, cp.pos))
		switch {
		case errors.As(err, &ccf):
			return e.fail(fmt.Errorf("unfence: the checkpoint %s moved since it was read (a consumer is running): stop every consumer and run again", cp.key))
		case err != nil:
			return e.fail(fmt.Errorf("unfence: checkpoint %s: %w", cp.key, err))
		}
		done++
	}
	fmt.Fprintf(e.stdout, "checkpoints unfenced: %d\n", done)
	done = 0
	for _, k := range heads {
		_, err := c.UpdateItem(ctx, table.UnfenceHead(e.table, k))
		switch {
		case errors.As(err, &ccf):
			// No longer fenced: unfenced meanwhile (another run).
		case err != nil:
			return e.fail(fmt.Errorf("unfence: report head %s: %w", k, err))
		default:
			done++
		}
	}
	fmt.Fprintf(e.stdout, "report heads unfenced: %d\n", done)
	// fencedAt says "rebased after the fence": unfenced, no branch is, and
	// counted repairs must wait for a new rebase (the second review, F-b).
	done = 0
	for _, k := range rebased {
		_, err := c.UpdateItem(ctx, table.ClearFencedAt(e.coordination, k))
		switch {
		case errors.As(err, &ccf):
		case err != nil:
			return e.fail(fmt.Errorf("unfence: applied item %s: %w", k, err))
		default:
			done++
		}
	}
	fmt.Fprintf(e.stdout, "rebase marks cleared (fencedAt): %d\n", done)
	lowered, err := table.LowerProtocol(ctx, c, e.table, table.Protocol, table.Protocol-1)
	if err != nil {
		return e.fail(fmt.Errorf("unfence: %w", err))
	}
	if lowered {
		fmt.Fprintf(e.stdout, "flags: protocol %d -> %d\n", table.Protocol, table.Protocol-1)
	} else {
		fmt.Fprintf(e.stdout, "flags: protocol left as it was (%s)\n", protocolName(flags))
	}
	return exitOK
}

func protocolName(f table.Flags) string {
	if !f.Exists || f.Protocol == 0 {
		return "absent"
	}
	return fmt.Sprint(f.Protocol)
}

// scanAll reads every item of in's table (paginated) into each.
func scanAll(ctx context.Context, c *dynamodb.Client, in *dynamodb.ScanInput, each func(map[string]types.AttributeValue)) error {
	p := dynamodb.NewScanPaginator(c, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, item := range page.Items {
			each(item)
		}
	}
	return nil
}
