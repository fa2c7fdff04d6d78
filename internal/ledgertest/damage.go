package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// DamageAPI is what Damage needs of DynamoDB.
type DamageAPI interface {
	WriteAPI
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// Damage breaks report items of one branch in every way issue 11 lists, as
// a writer other than the consumers could: a total of the wrong type (a
// daily report), a breakdown that is not a map (a monthly one), an entry
// field of the wrong type (a yearly one), an item padded to DynamoDB's
// 400 KB limit (a second daily one), an inline entry lacking one of its
// figures (a third daily one), a report deleted (a second monthly one) and
// a report that should not exist. The branch needs three daily, two
// monthly and one yearly report. It returns the damaged reports.
func Damage(ctx context.Context, api DamageAPI, tableName, tenant, branch string) ([]aggregates.ReportKey, error) {
	set := table.ReportSet{}
	p := dynamodb.NewQueryPaginator(api, &dynamodb.QueryInput{TableName: &tableName, ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": s(aggregates.ReportPK(tenant, branch))}})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, it := range out.Items {
			if err := set.Add(it); err != nil {
				return nil, err
			}
		}
	}
	byType := map[aggregates.PeriodType][]*table.StoredReport{}
	for _, k := range set.Keys() {
		if sr := set[k]; sr.Item != nil {
			byType[k.Period.Type] = append(byType[k.Period.Type], sr)
		}
	}
	if len(byType[aggregates.Daily]) < 3 || len(byType[aggregates.Monthly]) < 2 || len(byType[aggregates.Yearly]) < 1 {
		return nil, fmt.Errorf("damage %s/%s: want 3 daily, 2 monthly and a yearly report", tenant, branch)
	}
	update := func(k aggregates.ReportKey, expr string, names map[string]string, v ddbtypes.AttributeValue) error {
		_, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &tableName,
			Key:              map[string]ddbtypes.AttributeValue{"PK": s(k.Key().PK), "SK": s(k.Key().SK)},
			UpdateExpression: aws.String(expr), ExpressionAttributeNames: names,
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":x": v}})
		if err != nil {
			return fmt.Errorf("damage %s: %w", k, err)
		}
		return nil
	}
	daily, daily2 := byType[aggregates.Daily][0], byType[aggregates.Daily][1]
	monthly, monthly2 := byType[aggregates.Monthly][0], byType[aggregates.Monthly][1]
	yearly := byType[aggregates.Yearly][0]
	if err := update(daily.Key, "SET totalIncome = :x", nil, s("lots")); err != nil {
		return nil, err
	}
	if err := update(monthly.Key, "SET byCategory = :x", nil, s("not a map")); err != nil {
		return nil, err
	}
	pm, ok := yearly.Item[aggregates.ByCategory.Attribute()].(*ddbtypes.AttributeValueMemberM)
	if !ok || len(pm.Value) == 0 {
		return nil, fmt.Errorf("damage %s: no category inline", yearly.Key)
	}
	if err := update(yearly.Key, "SET byCategory.#k.totalExpense = :x", map[string]string{"#k": anyName(pm)}, s("z")); err != nil {
		return nil, err
	}
	daily3 := byType[aggregates.Daily][2]
	dm, ok := daily3.Item[aggregates.ByCategory.Attribute()].(*ddbtypes.AttributeValueMemberM)
	if !ok || len(dm.Value) == 0 {
		return nil, fmt.Errorf("damage %s: no category inline", daily3.Key)
	}
	if _, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &tableName,
		Key:              map[string]ddbtypes.AttributeValue{"PK": s(daily3.Key.Key().PK), "SK": s(daily3.Key.Key().SK)},
		UpdateExpression: aws.String("REMOVE byCategory.#k.transactionCount"), ExpressionAttributeNames: map[string]string{"#k": anyName(dm)}}); err != nil {
		return nil, fmt.Errorf("damage %s: %w", daily3.Key, err)
	}
	pad := 400*1024 - table.ItemSize(daily2.Item) - 64
	if err := update(daily2.Key, "SET #p = :x", map[string]string{"#p": "padding"}, s(strings.Repeat("p", pad))); err != nil {
		return nil, err
	}
	if _, err := api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &tableName,
		Key: map[string]ddbtypes.AttributeValue{"PK": s(monthly2.Key.Key().PK), "SK": s(monthly2.Key.Key().SK)}}); err != nil {
		return nil, err
	}
	ghost := aggregates.ReportKey{Tenant: tenant, Branch: branch, Period: aggregates.Period{Type: aggregates.Daily, Value: "2019-05-05"}}
	r := &aggregates.Report{}
	r.Add(aggregates.Totals{Count: 3}, [3]string{"phantom", "", ""})
	item, _ := table.EncodeReport(ghost, r, "2019-05-06T00:00:00Z")
	if _, err := api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &tableName, Item: item}); err != nil {
		return nil, err
	}
	return []aggregates.ReportKey{daily.Key, monthly.Key, yearly.Key, daily2.Key, daily3.Key, monthly2.Key, ghost}, nil
}

// anyName returns a name of a non-empty map.
func anyName(m *ddbtypes.AttributeValueMemberM) string {
	for name := range m.Value {
		return name
	}
	return ""
}

// DamageFound checks what reconcile found after Damage while consumers
// went on: every damaged report is among diffs, and no report of another
// branch differs. The error names what is wrong.
func DamageFound(diffs []processor.Difference, damaged []aggregates.ReportKey, tenant, branch string) error {
	named := map[aggregates.ReportKey]bool{}
	var problems []string
	for _, d := range diffs {
		if d.Report.Tenant != tenant || d.Report.Branch != branch {
			problems = append(problems, "another branch differs: "+d.String())
		}
		named[d.Report] = true
	}
	for _, k := range damaged {
		if !named[k] {
			problems = append(problems, "reconcile does not name "+k.String())
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}
