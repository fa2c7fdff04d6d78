package bench

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// WorkloadSpec describes one of the workloads. Every workload is a
// deterministic list of changes for its seed.
type WorkloadSpec struct {
	Name        string // a, b, c, d
	Description string
	Branches    int
	Days        int     // createdAt spread over this many days
	ModifyShare float64 // of the changes, modifies of a live transaction
	DeleteShare float64 // of the changes, deletes of a live transaction
	// Shuffled writes the changes in random order (a backfill) instead of
	// createdAt order (a live system).
	Shuffled bool
	// Categories and CostCenters are the sizes of the name pools (0: 20
	// and 5); CostCenterShare is the share of transactions with a cost
	// centre (0: 0.6).
	Categories, CostCenters int
	CostCenterShare         float64
	// LedgerOnly leaves the seed designs (approaches 1–3) out: they keep
	// every name of a report in its one item, which this workload takes
	// past what the report layout allows (and, at full size, past
	// DynamoDB's 400 KB item limit).
	LedgerOnly bool
}

// namePools are the breakdown names a workload draws from.
type namePools struct {
	categories, costCenters []string
	costCenterShare         float64
}

func (w WorkloadSpec) pools() namePools {
	if w.Categories == 0 && w.CostCenters == 0 && w.CostCenterShare == 0 {
		return namePools{categories, costCenters, 0.6}
	}
	p := namePools{names("category", w.Categories), names("cc", w.CostCenters), w.CostCenterShare}
	if w.Categories == 0 {
		p.categories = categories
	}
	if w.CostCenters == 0 {
		p.costCenters = costCenters
	}
	if w.CostCenterShare == 0 {
		p.costCenterShare = 0.6
	}
	return p
}

// The workloads of issue 6. Each has 20 categories, 5 cost centres (on 60%
// of the transactions) and 4 payment methods (on 80%). Live workloads (a, b,
// c) arrive in createdAt order, 5% of their inserts backdated by up to 60
// days, as corrections arrive.
var (
	WorkloadA = WorkloadSpec{Name: "a", Description: "one busy branch, one day", Branches: 1, Days: 1, ModifyShare: 0.10, DeleteShare: 0.05}
	WorkloadB = WorkloadSpec{Name: "b", Description: "50 branches, 90 days, 10% modifies, 5% deletes", Branches: 50, Days: 90, ModifyShare: 0.10, DeleteShare: 0.05}
	WorkloadC = WorkloadSpec{Name: "c", Description: "1,000 branches, uniform, 90 days", Branches: 1000, Days: 90, ModifyShare: 0.10, DeleteShare: 0.05}
	WorkloadD = WorkloadSpec{Name: "d", Description: "backfill: 50 branches, 3 years, random order", Branches: 50, Days: 3 * 365, Shuffled: true}
	// WorkloadE is high cardinality (issue 11): one branch-year whose
	// transactions draw from 2,000 categories and 20,000 cost centres (one
	// on every transaction), changes spread over the year: its monthly and
	// yearly reports hold far more names than a report item keeps inline.
	WorkloadE = WorkloadSpec{Name: "e", Description: "high cardinality: one branch-year, 2,000 categories, 20,000 cost centres", Branches: 1, Days: 365,
		ModifyShare: 0.10, DeleteShare: 0.05, Categories: 2000, CostCenters: 20000, CostCenterShare: 1, LedgerOnly: true}
)

const (
	backdatedShare = 0.05
	maxBackdate    = 60 * 24 * time.Hour
	tenant         = "bench"
)

var (
	categories     = names("category", 20)
	costCenters    = names("cc", 5)
	paymentMethods = []string{"card", "cash", "pix", "wire"}
	// workloadEnd is the simulated "now" at the end of every live workload.
	workloadEnd = time.Date(2025, 3, 31, 18, 0, 0, 0, time.UTC)
)

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%02d", prefix, i+1)
	}
	return out
}

// OpKind is what a change does to a transaction item.
type OpKind int

// The change kinds.
const (
	OpInsert OpKind = iota
	OpModify
	OpDelete
)

// Op is one change of a workload: the transaction item as it is after the
// change (nil for a delete) and as it was before (nil for an insert).
// updatedAt is stamped when the change is written.
type Op struct {
	Kind     OpKind
	Key      aggregates.Key
	Old, New map[string]ddbtypes.AttributeValue
}

// Generate returns n changes of the workload for seed.
func (w WorkloadSpec) Generate(n int, seed uint64) []Op {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	pools := w.pools()
	start := workloadEnd.Add(-time.Duration(w.Days) * 24 * time.Hour)
	span := workloadEnd.Sub(start)
	if w.Days == 1 {
		start = time.Date(workloadEnd.Year(), workloadEnd.Month(), workloadEnd.Day(), 0, 0, 0, 0, time.UTC)
		span = workloadEnd.Sub(start)
	}
	type live struct {
		key  aggregates.Key
		item map[string]ddbtypes.AttributeValue
	}
	var alive []live
	ops := make([]Op, 0, n)
	for i := 0; i < n; i++ {
		// The simulated clock advances evenly over the workload's span.
		now := start.Add(time.Duration(float64(span) * (float64(i) + 0.5) / float64(n)))
		r := rng.Float64()
		switch {
		case !w.Shuffled && len(alive) > 0 && r < w.ModifyShare:
			j := rng.IntN(len(alive))
			old := alive[j].item
			item := modified(rng, pools, old)
			alive[j].item = item
			ops = append(ops, Op{Kind: OpModify, Key: alive[j].key, Old: old, New: item})
		case !w.Shuffled && len(alive) > 0 && r < w.ModifyShare+w.DeleteShare:
			j := rng.IntN(len(alive))
			ops = append(ops, Op{Kind: OpDelete, Key: alive[j].key, Old: alive[j].item})
			alive[j] = alive[len(alive)-1]
			alive = alive[:len(alive)-1]
		default:
			created := now
			if w.Shuffled {
				created = start.Add(time.Duration(rng.Int64N(int64(span))))
			} else if rng.Float64() < backdatedShare {
				created = now.Add(-time.Duration(1 + rng.Int64N(int64(maxBackdate))))
			}
			branch := fmt.Sprintf("br%04d", 1+rng.IntN(w.Branches))
			item := newTransaction(rng, pools, branch, created, fmt.Sprintf("%s%07d", w.Name, i))
			k := aggregates.Key{PK: aggregates.TransactionPK(tenant, branch), SK: str(item["SK"])}
			alive = append(alive, live{key: k, item: item})
			ops = append(ops, Op{Kind: OpInsert, Key: k, New: item})
		}
	}
	if w.Shuffled {
		rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	}
	return ops
}

func str(v ddbtypes.AttributeValue) string {
	if s, ok := v.(*ddbtypes.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func sAV(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
func nAV(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberN{Value: v} }

func amount(rng *rand.Rand) string {
	return strconv.Itoa(1+rng.IntN(2000)) + "." + fmt.Sprintf("%02d", rng.IntN(100))
}

func newTransaction(rng *rand.Rand, pools namePools, branch string, created time.Time, id string) map[string]ddbtypes.AttributeValue {
	date := created.UTC().Format("2006-01-02")
	typ := "EXPENSE"
	if rng.IntN(5) < 2 {
		typ = "INCOME"
	}
	item := map[string]ddbtypes.AttributeValue{
		"PK": sAV(aggregates.TransactionPK(tenant, branch)), "SK": sAV(date + "#" + id),
		"entityType": sAV(aggregates.EntityTransaction), "id": sAV(id), "tenantId": sAV(tenant), "branchId": sAV(branch),
		"type": sAV(typ), "amount": nAV(amount(rng)), "category": sAV(pools.categories[rng.IntN(len(pools.categories))]),
		"createdAt": sAV(created.UTC().Format(time.RFC3339Nano)), "version": nAV("1"),
	}
	if rng.Float64() < pools.costCenterShare {
		item["costCenter"] = sAV(pools.costCenters[rng.IntN(len(pools.costCenters))])
	}
	if rng.Float64() < 0.8 {
		item["paymentMethod"] = sAV(paymentMethods[rng.IntN(len(paymentMethods))])
	}
	return item
}

// modified returns old with aggregated fields changed, as a correction
// would: the amount (most often), the category, the type, the cost centre
// or the payment method; createdAt (and so the sort key) stays.
func modified(rng *rand.Rand, pools namePools, old map[string]ddbtypes.AttributeValue) map[string]ddbtypes.AttributeValue {
	item := make(map[string]ddbtypes.AttributeValue, len(old))
	for k, v := range old {
		item[k] = v
	}
	switch r := rng.IntN(10); {
	case r < 6:
		item["amount"] = nAV(amount(rng))
	case r < 8:
		item["category"] = sAV(pools.categories[rng.IntN(len(pools.categories))])
	case r < 9:
		if str(old["type"]) == "INCOME" {
			item["type"] = sAV("EXPENSE")
		} else {
			item["type"] = sAV("INCOME")
		}
	default:
		item["costCenter"] = sAV(pools.costCenters[rng.IntN(len(pools.costCenters))])
		item["paymentMethod"] = sAV(paymentMethods[rng.IntN(len(paymentMethods))])
	}
	v, _ := strconv.Atoi(old["version"].(*ddbtypes.AttributeValueMemberN).Value)
	item["version"] = nAV(strconv.Itoa(v + 1))
	return item
}

// generateFrom returns inserts first … first+n−1 of an insert-only run of
// total changes of the workload, so that a large backlog can be generated
// and written a chunk at a time.
func (w WorkloadSpec) generateFrom(first, n, total int, seed uint64) []Op {
	rng := rand.New(rand.NewPCG(seed, uint64(first)))
	pools := w.pools()
	start := workloadEnd.Add(-time.Duration(w.Days) * 24 * time.Hour)
	if w.Days == 1 {
		start = time.Date(workloadEnd.Year(), workloadEnd.Month(), workloadEnd.Day(), 0, 0, 0, 0, time.UTC)
	}
	span := workloadEnd.Sub(start)
	ops := make([]Op, n)
	for j := range ops {
		i := first + j
		created := start.Add(time.Duration(float64(span) * (float64(i) + 0.5) / float64(total)))
		if rng.Float64() < backdatedShare {
			created = created.Add(-time.Duration(1 + rng.Int64N(int64(maxBackdate))))
		}
		branch := fmt.Sprintf("br%04d", 1+rng.IntN(w.Branches))
		item := newTransaction(rng, pools, branch, created, fmt.Sprintf("%s%08d", w.Name, i))
		ops[j] = Op{Kind: OpInsert, Key: aggregates.Key{PK: aggregates.TransactionPK(tenant, branch), SK: str(item["SK"])}, New: item}
	}
	return ops
}
