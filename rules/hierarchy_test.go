package rules

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/store"
)

// hierarchy is an org's budget over its teams' over their users': 3 teams
// of 3 users, whose limits add up past their parent's at every level
// (3 x 15 = 45 > 40 per team, 3 x 40 = 120 > 100 for the org).
const hierarchy = `
domain: llm
rules:
  - name: org
    match: {org: "*"}
    count_by: [org]
    limit: 100
    calendar: {period: month, zone: UTC}
  - name: team
    match: {team: "*"}
    count_by: [team]
    limit: 40
    calendar: {period: month, zone: UTC}
  - name: user
    match: {user: "*"}
    count_by: [user]
    limit: 15
    calendar: {period: month, zone: UTC}
`

// member is the request of one user: one descriptor per level.
func member(org string, team, user int) Request {
	return Request{Descriptors: []Descriptor{desc("org=" + org), desc(fmt.Sprintf("team=%s-t%d", org, team)),
		desc(fmt.Sprintf("user=%s-t%d-u%d", org, team, user))}}
}

// TestHierarchyAllOrNone: a request that must pass the org's, its team's
// and its user's budgets is counted on all three or on none. A user at its
// limit charges neither its team nor the org; a team at its limit charges
// neither the org nor its users. Then 9 users send 20 requests each at
// once, past every level's limit: each level counts exactly the requests
// allowed through it, none past its limit, and the org is filled exactly
// (a request is only refused when a level it needs is full). Memory store,
// a real Redis and a real Redis Cluster.
func TestHierarchyAllOrNone(t *testing.T) {
	t.Run("memory", func(t *testing.T) { checkHierarchy(t, memstore.New(memstore.Options{}), true) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr()}, ClientTime: true, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		checkHierarchy(t, rs, true)
	})
	t.Run("redis-cluster", func(t *testing.T) {
		// The three levels' keys fall in three slots. The store decides
		// across slots in two rounds (check all, then count slot by slot),
		// so a request that another exhausts a level between the rounds is
		// rejected while the other levels keep its count: an overcount,
		// never past a limit (docs/redis.md). Sequential requests stay
		// exact.
		cl := redistest.StartCluster(t)
		rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: cl.Addrs()[:1], Cluster: true, ClientTime: true, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		checkHierarchy(t, rs, false)
	})
}

// checkHierarchy runs the test on st; exact is false for a store that may
// count a concurrently rejected request on some levels (Redis Cluster
// across slots), where each level must count at least what it allowed and
// never past its limit.
func checkHierarchy(t *testing.T, st store.Store, exact bool) {
	c := newClock()
	e := NewEngine(mustParse(t, hierarchy), st, WithClock(c.now))
	ctx := context.Background()
	used := func(req Request) [3]int64 {
		t.Helper()
		r, err := e.Usage(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var out [3]int64
		for i, s := range r.Statuses {
			out[i] = s.Used
		}
		return out
	}
	decide := func(req Request) Result {
		t.Helper()
		r, err := e.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// Sequential edges on org "seq": a full user charges no parent.
	u := member("seq", 0, 0)
	for range 15 {
		if !decide(u).Allowed {
			t.Fatal("rejected under every limit")
		}
	}
	if r := decide(u); r.Allowed || r.Statuses[2].Decision.Allowed || !r.Statuses[0].Decision.Allowed {
		t.Fatalf("16th request of a user of 15: %+v", r.Statuses)
	}
	if got := used(u); got != [3]int64{15, 15, 15} {
		t.Fatalf("after a user's rejection: org, team, user used %v, want 15 each", got)
	}
	// A full team charges neither the org nor a user with room.
	for k := 1; k <= 2; k++ {
		for range 15 {
			decide(member("seq", 0, k))
		}
	}
	if got := used(member("seq", 0, 2)); got != [3]int64{40, 40, 10} {
		t.Fatalf("a team of 40 with users at 15, 15, 10: %v, want org 40, team 40, user 10", got)
	}

	// Concurrent, past every level, on org "c".
	var mu sync.Mutex
	allowed := map[string]int64{}
	var wg sync.WaitGroup
	for team := range 3 {
		for user := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := member("c", team, user)
				for range 20 {
					r, err := e.Check(ctx, req)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						mu.Lock()
						allowed["org"]++
						allowed[fmt.Sprint("team", team)]++
						allowed[fmt.Sprint("user", team, user)]++
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	over := int64(0)
	defer func() { t.Logf("allowed %d of 180; users counted %d rejected requests", allowed["org"], over) }()
	if allowed["org"] != 100 && (exact || allowed["org"] > 100) {
		t.Errorf("org allowed %d, want exactly 100", allowed["org"])
	}
	for team := range 3 {
		for user := range 3 {
			got := used(member("c", team, user))
			want := [3]int64{allowed["org"], allowed[fmt.Sprint("team", team)], allowed[fmt.Sprint("user", team, user)]}
			if got[0] > 100 || got[1] > 40 || got[2] > 15 || (exact && got != want) ||
				got[0] < want[0] || got[1] < want[1] || got[2] < want[2] {
				t.Errorf("team %d user %d: counted org, team, user %v; allowed through them %v (limits 100, 40, 15)", team, user, got, want)
			}
			over += got[2] - want[2]
		}
	}
}
