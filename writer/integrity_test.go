package writer_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

// race runs f(i) for i in [0, n) in n goroutines released together.
func race(n int, f func(i int) reply) []reply {
	replies := make([]reply, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[i] = f(i)
		}()
	}
	close(start)
	wg.Wait()
	return replies
}

// exactlyOne checks that exactly one reply has status won and every other
// is a 409 of type lost; it returns the winner's index.
func exactlyOne(t *testing.T, replies []reply, won int, lost string) int {
	t.Helper()
	winner := -1
	for i, r := range replies {
		switch r.Status {
		case won:
			require.Equal(t, -1, winner, "a second request won: %s", r)
			winner = i
		case http.StatusConflict:
			assert.Equal(t, lost, r.problem(t).Type, "answer %s", r)
		default:
			t.Errorf("unexpected answer %s", r)
		}
	}
	require.NotEqual(t, -1, winner, "one request wins")
	return winner
}

// TestEmailUniqueness_50RacersForOneAddressExactlyOneWins races 50
// requests for one address three ways: 50 account creates (in 5 tenants,
// the address spelled differently each time), 50 adds of the address to 50
// existing accounts, and 50 primary changes of one account from the same
// version. Each time exactly one wins, the others get 409 (412 for the
// stale primary changes) and write nothing, and a scan of the table finds
// the owner items and the accounts in agreement.
func TestEmailUniqueness_50RacersForOneAddressExactlyOneWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ownTable(t))
	const n = 50
	tenants := make([]string, 5)
	for i := range tenants {
		tenants[i] = e.newTenant()
	}

	address := uniqueAddress("race")
	spellings := []string{address, strings.ToUpper(address), "  " + address + " ", strings.ToUpper(address[:1]) + address[1:]}
	replies := race(n, func(i int) reply {
		return e.postAccount(tenants[i%len(tenants)], fmt.Sprintf(`{"firstName":"R","lastName":"%d","emails":[{"address":%q,"verified":true}]}`, i, spellings[i%len(spellings)]))
	})
	w := exactlyOne(t, replies, http.StatusCreated, writer.ProblemEmailTaken)
	winner := decodeAs[writer.Account](t, replies[w])
	st := e.requireConsistent()
	assert.Equal(t, winner.Tenant+"/"+winner.ID, st.emailOwners[address])
	assert.Len(t, st.accounts, 1, "the losers wrote no profile")

	// 50 accounts, then all add one address at once.
	accounts := make([]writer.Account, n)
	for i := range accounts {
		accounts[i] = e.account(tenants[i%len(tenants)], uniqueAddress("holder"))
	}
	contested := uniqueAddress("contested")
	replies = race(n, func(i int) reply {
		return e.send(req{method: "POST", path: accountPath(accounts[i]) + "/emails", body: `{"address":"` + contested + `","verified":true}`,
			headers: []string{"Idempotency-Key", newKey(), "Authorization", "Bearer " + e.adminToken()}})
	})
	w = exactlyOne(t, replies, http.StatusCreated, writer.ProblemEmailTaken)
	st = e.requireConsistent()
	assert.Equal(t, accounts[w].Tenant+"/"+accounts[w].ID, st.emailOwners[contested])
	for i, a := range accounts {
		r := e.asAdmin(req{method: "GET", path: accountPath(a)})
		got := decodeAs[writer.Account](t, r)
		if i == w {
			assert.Len(t, got.Emails, 2)
			assert.Equal(t, int64(2), got.Version)
		} else {
			assert.Equal(t, a, got, "a loser is unchanged")
		}
	}

	// One account with several verified addresses; 50 requests make
	// different ones primary from the same version.
	a := accounts[w]
	var candidates []string
	for i := range 4 {
		addr := uniqueAddress("cand" + strconv.Itoa(i))
		r := e.asAdmin(req{method: "POST", path: accountPath(a) + "/emails", body: `{"address":"` + addr + `","verified":true}`})
		require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
		a = decodeAs[writer.Account](t, r)
		candidates = append(candidates, addr)
	}
	replies = race(n, func(i int) reply {
		return e.asAdmin(req{method: "PATCH", path: emailPath(a, candidates[i%len(candidates)]), body: `{"primary":true}`,
			headers: []string{"If-Match", etagOf(a.Version)}})
	})
	winners := 0
	for _, r := range replies {
		switch r.Status {
		case http.StatusOK:
			winners++
		case http.StatusPreconditionFailed:
			assert.Equal(t, a.Version+1, *r.problem(t).CurrentVersion)
		case http.StatusConflict:
			assert.Equal(t, writer.ProblemConcurrentModification, r.problem(t).Type, "answer %s", r)
		default:
			t.Errorf("unexpected answer %s", r)
		}
	}
	assert.Equal(t, 1, winners, "exactly one primary change from one version")
	e.requireConsistent()
}

// TestDirectory_RandomizedOperationsKeepOwnersAndAccountsConsistent runs
// concurrent workers doing random account and email operations over a
// small pool of addresses (so they collide all the time), then checks by
// scanning the table that every owner item names an account holding its
// address and every address held has its owner item, that every account
// has exactly one primary, verified, and that what the API serves is what
// the table holds. LEDGER_DIRECTORY_SEED picks the seed (logged).
func TestDirectory_RandomizedOperationsKeepOwnersAndAccountsConsistent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ownTable(t))
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("LEDGER_DIRECTORY_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (LEDGER_DIRECTORY_SEED=%d to repeat the choices; the interleaving differs)", seed, seed)
	tenants := []string{e.tenant, e.newTenant()}
	pool := make([]string, 14)
	for i := range pool {
		pool[i] = uniqueAddress("p" + strconv.Itoa(i))
	}

	var mu sync.Mutex
	known := map[string]writer.Account{} // tenant/id → last state seen
	statuses := map[string]map[int]int{}
	note := func(op string, r reply) {
		mu.Lock()
		defer mu.Unlock()
		if statuses[op] == nil {
			statuses[op] = map[int]int{}
		}
		statuses[op][r.Status]++
		if r.Status >= 500 || r.Status == http.StatusBadRequest {
			t.Errorf("%s: unexpected answer %s", op, r)
		}
	}
	remember := func(r reply) {
		if r.Status == http.StatusOK || r.Status == http.StatusCreated {
			a := decodeAs[writer.Account](t, r)
			mu.Lock()
			if old, ok := known[a.Tenant+"/"+a.ID]; !ok || old.Version < a.Version {
				known[a.Tenant+"/"+a.ID] = a
			}
			mu.Unlock()
		}
	}
	pick := func(rng *rand.Rand) (writer.Account, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(known) == 0 {
			return writer.Account{}, false
		}
		ids := make([]string, 0, len(known))
		for id := range known {
			ids = append(ids, id)
		}
		// Map order is random; sort for the seed to mean something.
		slices.Sort(ids)
		return known[ids[rng.IntN(len(ids))]], true
	}

	const rounds, workers, opsPerWorker = 2, 6, 40
	for round := range rounds {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(round*workers+w)))
				addr := func() string { return pool[rng.IntN(len(pool))] }
				for range opsPerWorker {
					a, ok := pick(rng)
					op := rng.IntN(20)
					if !ok || op < 3 || op == 19 {
						n := 1 + rng.IntN(3)
						var emails []string
						seen := map[string]bool{}
						for i := 0; i < n; i++ {
							x := addr()
							if seen[x] {
								continue
							}
							seen[x] = true
							emails = append(emails, fmt.Sprintf(`{"address":%q,"verified":%t,"primary":%t}`, x, i == 0 || rng.IntN(2) == 0, i == 0))
						}
						r := e.postAccount(tenants[rng.IntN(len(tenants))], `{"firstName":"F","lastName":"L","emails":[`+strings.Join(emails, ",")+`]}`)
						note("create", r)
						remember(r)
						continue
					}
					ifMatch := []string{"If-Match", etagOf(a.Version)}
					var r reply
					var name string
					switch {
					case op < 7:
						name = "add"
						r = e.asAdmin(req{method: "POST", path: accountPath(a) + "/emails", body: fmt.Sprintf(`{"address":%q,"verified":%t}`, addr(), rng.IntN(2) == 0)})
					case op < 10:
						name = "remove"
						target := addr()
						if len(a.Emails) > 0 && rng.IntN(2) == 0 {
							target = a.Emails[rng.IntN(len(a.Emails))].Address
						}
						r = e.asAdmin(req{method: "DELETE", path: emailPath(a, target)})
					case op < 12:
						name = "verify"
						if len(a.Emails) == 0 {
							continue
						}
						r = e.asAdmin(req{method: "PATCH", path: emailPath(a, a.Emails[rng.IntN(len(a.Emails))].Address), body: `{"verified":true}`, headers: ifMatch})
					case op < 16:
						name = "primary"
						if len(a.Emails) == 0 {
							continue
						}
						r = e.asAdmin(req{method: "PATCH", path: emailPath(a, a.Emails[rng.IntN(len(a.Emails))].Address), body: `{"primary":true}`, headers: ifMatch})
					case op < 18:
						name = "patch"
						r = e.asAdmin(req{method: "PATCH", path: accountPath(a), body: `{"lastName":"L` + strconv.Itoa(rng.IntN(100)) + `"}`, headers: ifMatch})
					default:
						name = "delete"
						r = e.asAdmin(req{method: "DELETE", path: accountPath(a)})
						if r.Status == http.StatusNoContent {
							mu.Lock()
							delete(known, a.Tenant+"/"+a.ID)
							mu.Unlock()
						}
					}
					note(name, r)
					if name != "delete" {
						remember(r)
					}
					if r.Status == http.StatusNotFound && strings.Contains(string(r.Body), "no such account") {
						mu.Lock()
						delete(known, a.Tenant+"/"+a.ID)
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		// Quiescent: the table must be consistent after every round.
		e.requireConsistent()
	}
	t.Logf("answers by operation and status: %v", statuses)

	st := e.requireConsistent()
	held := 0
	for id, sa := range st.accounts {
		tenant, acc, _ := strings.Cut(id, "/")
		r := e.asAdmin(req{method: "GET", path: "/v1/tenants/" + tenant + "/accounts/" + acc})
		require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
		got := decodeAs[writer.Account](t, r)
		var scanned []string
		for _, em := range sa.emails {
			scanned = append(scanned, str(em, "email"))
		}
		assert.ElementsMatch(t, scanned, addresses(got), "%s: the API serves what the table holds", id)
		for _, em := range sa.emails {
			if flag(em, "isVerified") {
				held++
			}
		}
	}
	assert.Equal(t, len(st.emailOwners), held, "one owner item per verified address held")
	t.Logf("%d accounts, %d of %d pool addresses held", len(st.accounts), held, len(pool))
	assert.Positive(t, statuses["create"][http.StatusConflict]+statuses["add"][http.StatusConflict], "the pool made requests collide")
}
