package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/store"
)

// lateHierarchy is hierarchy with costs known after the response: each
// level is checked (a peek, counting nothing) before the request and
// charged after it.
var lateHierarchy = strings.ReplaceAll(hierarchy, "    calendar:", "    charge_after_response: true\n    calendar:")

// TestLateHierarchyChargesNoParent: on the check-then-charge path, a
// request whose check one level rejects is charged to none (a full user
// charges neither its team nor the org), and under concurrency every level
// counts exactly the charges of the requests whose check passed, past its
// limit by at most what was in flight under it (a user's own requests are
// sequential: never past). Memory, Redis, and a Redis Cluster with the
// levels under one hash_tag.
func TestLateHierarchyChargesNoParent(t *testing.T) {
	t.Run("memory", func(t *testing.T) { checkLateHierarchy(t, lateHierarchy, memstore.New(memstore.Options{})) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr()}, ClientTime: true, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		checkLateHierarchy(t, lateHierarchy, rs)
	})
	t.Run("redis-cluster, hash_tag", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: cl.Addrs()[:1], Cluster: true, ClientTime: true, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		checkLateHierarchy(t, withHashTag(lateHierarchy), rs)
	})
}

func checkLateHierarchy(t *testing.T, file string, st store.Store) {
	c := newEngClock()
	e := rules.NewEngine(mustRules(t, file), st, rules.WithClock(c.now))
	ctx := context.Background()
	used := func(req rules.Request) [3]int64 { t.Helper(); return levelsUsed(t, e, req) }
	// call checks req and, if the check passes, charges it 1; it reports
	// whether it charged.
	call := func(req rules.Request) bool {
		peek := req
		peek.Peek = true
		r, err := e.Check(ctx, peek)
		if err != nil {
			t.Error(err)
			return false
		}
		if !r.Allowed {
			return false
		}
		charge := req
		charge.Hits = 1
		if _, err := e.Charge(ctx, charge); err != nil {
			t.Error(err)
			return false
		}
		return true
	}

	u := member("seq", 0, 0)
	for i := range 15 {
		if !call(u) {
			t.Fatalf("check %d of a user of 15 rejected", i+1)
		}
	}
	if call(u) {
		t.Fatal("the 16th check of a user of 15 passed")
	}
	if got := used(u); got != [3]int64{15, 15, 15} {
		t.Fatalf("after a user's rejected check: org, team, user used %v, want 15 each", got)
	}

	var mu sync.Mutex
	charged := map[string]int64{}
	var wg sync.WaitGroup
	for team := range 3 {
		for user := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := member("c", team, user)
				for range 20 {
					if call(req) {
						mu.Lock()
						charged["org"]++
						charged[fmt.Sprint("team", team)]++
						charged[fmt.Sprint("user", team, user)]++
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("charged %d of 180; teams %d %d %d", charged["org"], charged["team0"], charged["team1"], charged["team2"])
	if charged["org"] < 100 || charged["org"] > 100+8 {
		t.Errorf("org charged %d, want 100 to 108 (its limit plus the 8 other users in flight)", charged["org"])
	}
	for team := range 3 {
		for user := range 3 {
			got := used(member("c", team, user))
			want := [3]int64{charged["org"], charged[fmt.Sprint("team", team)], charged[fmt.Sprint("user", team, user)]}
			if got != want || got[1] > 40+2 || got[2] > 15 {
				t.Errorf("team %d user %d: counted org, team, user %v; charged through them %v (limits 100, 40, 15; in flight 8, 2, 0)", team, user, got, want)
			}
		}
	}
}
