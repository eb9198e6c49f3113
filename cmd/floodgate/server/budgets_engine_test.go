package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/store"
)

// The rule engine's budget features on each counter store: the memory
// store, a real Redis and a real Redis Cluster (started on loopback by
// redistest). They live in this module because it is the one that holds
// both the rule engine and the Redis store.

func mustRules(t testing.TB, text string) *rules.Set {
	t.Helper()
	s, err := rules.Parse("test.yaml", []byte(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

// engDesc builds a descriptor from "k=v" strings.
func engDesc(kv ...string) rules.Descriptor {
	d := make(rules.Descriptor, 0, len(kv))
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		d = append(d, rules.Entry{Key: k, Value: v})
	}
	return d
}

func engCheck(t testing.TB, e *rules.Engine, req rules.Request) rules.Result {
	t.Helper()
	r, err := e.Check(context.Background(), req)
	if err != nil {
		t.Fatalf("Check(%v): %v", req, err)
	}
	return r
}

// engClock is a settable clock for an engine.
type engClock struct{ ns atomic.Int64 }

func newEngClock() *engClock {
	c := &engClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *engClock) now() time.Time { return time.Unix(0, c.ns.Load()) }

const usageRules = `
domain: llm
rules:
  - name: monthly
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 1000
    calendar: {period: month, zone: America/New_York}
    warn_at: 0.8
  - name: daily
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 100
    window: 24h
    algorithm: fixed-window
  - name: per-minute
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 50
    window: 1m
  - name: bucket
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 40
    window: 1m
    algorithm: token-bucket
`

// TestUsage: Usage reports every applicable rule's used, remaining, limit,
// period end and warning state, counts nothing (a check after any number
// of usage calls sees what it would have seen without them), ignores hits,
// and reports a key that charges overspent as used past its limit. On the
// memory store and on a real Redis.
func TestUsage(t *testing.T) {
	t.Run("memory", func(t *testing.T) { checkUsage(t, memstore.New(memstore.Options{})) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr()}, ClientTime: true, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		checkUsage(t, rs)
	})
}

func checkUsage(t *testing.T, st store.Store) {
	c := newEngClock()
	ny, _ := time.LoadLocation("America/New_York")
	c.ns.Store(time.Date(2025, 3, 31, 12, 0, 0, 0, ny).UnixNano())
	e := rules.NewEngine(mustRules(t, usageRules), st, rules.WithClock(c.now))
	ctx := context.Background()
	acme := rules.Request{Descriptors: []rules.Descriptor{engDesc("tenant=" + t.Name())}}
	usage := func() map[string]rules.Status {
		t.Helper()
		r, err := e.Usage(ctx, rules.Request{Descriptors: acme.Descriptors, Hits: 5000})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]rules.Status{}
		for _, s := range r.Statuses {
			if s.CrossedWarning {
				t.Fatalf("usage crossed a warning: %+v", s)
			}
			out[s.Rule] = s
		}
		if len(out) != 4 {
			t.Fatalf("usage statuses %+v, want 4 rules", r.Statuses)
		}
		return out
	}
	if u := usage(); u["monthly"].Used != 0 || u["monthly"].Decision.Remaining != 1000 || u["bucket"].Decision.Remaining != 40 {
		t.Fatalf("fresh key: %+v", u)
	}
	if r := engCheck(t, e, rules.Request{Descriptors: acme.Descriptors, Hits: 30}); !r.Allowed {
		t.Fatalf("30 of 40: %+v", r)
	}
	monthEnd := time.Date(2025, 4, 1, 0, 0, 0, 0, ny)
	for range 3 {
		u := usage()
		for rule, want := range map[string][2]int64{"monthly": {1000, 30}, "daily": {100, 30}, "per-minute": {50, 30}, "bucket": {40, 30}} {
			s := u[rule]
			if s.Decision.Limit != want[0] || s.Used != want[1] || s.Decision.Remaining != want[0]-want[1] || s.Warning || !s.Decision.Allowed {
				t.Fatalf("%s: limit %d used %d remaining %d warning %v allowed %v; want %d, %d, %d, false, true",
					rule, s.Decision.Limit, s.Used, s.Decision.Remaining, s.Warning, s.Decision.Allowed, want[0], want[1], want[0]-want[1])
			}
		}
		if m := u["monthly"]; !m.PeriodEnd.Equal(monthEnd) || m.Decision.ResetAfter != monthEnd.Sub(c.now()) || m.Calendar == "" {
			t.Fatalf("monthly: period end %v, reset after %v; want %v, %v", m.PeriodEnd, m.Decision.ResetAfter, monthEnd, monthEnd.Sub(c.now()))
		}
		if d := u["daily"]; d.PeriodEnd.IsZero() || d.PeriodEnd.Sub(c.now()) != d.Decision.ResetAfter {
			t.Fatalf("daily: period end %v, reset after %v", d.PeriodEnd, d.Decision.ResetAfter)
		}
		if !u["per-minute"].PeriodEnd.IsZero() || !u["bucket"].PeriodEnd.IsZero() {
			t.Fatal("a rolling window reported a period end")
		}
	}
	// Counting nothing: 10 more fit the bucket of 40 after 30, not fewer.
	if r := engCheck(t, e, rules.Request{Descriptors: acme.Descriptors, Hits: 10}); !r.Allowed {
		t.Fatalf("usage calls counted: 10 more of 40 rejected: %+v", r.Statuses)
	}
	// A charge past the limits: used goes past them, the warning is on.
	if _, err := e.Charge(ctx, rules.Request{Descriptors: acme.Descriptors, Hits: 800}); err != nil {
		t.Fatal(err)
	}
	u := usage()
	if m := u["monthly"]; m.Used != 840 || m.Decision.Remaining != 160 || !m.Warning {
		t.Fatalf("monthly after a charge of 800: used %d remaining %d warning %v; want 840, 160, true", m.Used, m.Decision.Remaining, m.Warning)
	}
	for _, rule := range []string{"daily", "per-minute"} {
		if s := u[rule]; s.Used != 840 || s.Decision.Remaining != 0 || s.Decision.Allowed {
			t.Fatalf("%s after a charge of 800: used %d remaining %d allowed %v; want 840, 0, false", rule, s.Used, s.Decision.Remaining, s.Decision.Allowed)
		}
	}
	if r, err := e.Usage(ctx, rules.Request{Descriptors: []rules.Descriptor{engDesc("user=x")}}); err != nil || r.Unmatched == "" || len(r.Statuses) != 0 {
		t.Fatalf("no rule applies: %+v, %v", r, err)
	}
}

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
func member(org string, team, user int) rules.Request {
	return rules.Request{Descriptors: []rules.Descriptor{engDesc("org=" + org), engDesc(fmt.Sprintf("team=%s-t%d", org, team)),
		engDesc(fmt.Sprintf("user=%s-t%d-u%d", org, team, user))}}
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
	t.Run("memory", func(t *testing.T) { checkHierarchy(t, hierarchy, memstore.New(memstore.Options{}), true) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr()}, ClientTime: true, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		checkHierarchy(t, hierarchy, rs, true)
	})
	cl := redistest.StartCluster(t)
	cluster := func(t *testing.T) store.Store {
		rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: cl.Addrs()[:1], Cluster: true, ClientTime: true, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		return rs
	}
	t.Run("redis-cluster, hash_tag", func(t *testing.T) {
		// The three rules share a hash tag: every level's keys are in one
		// slot, decided in one script call, exactly as on one server.
		checkHierarchy(t, taggedHierarchy, cluster(t), true)
	})
	t.Run("redis-cluster", func(t *testing.T) {
		// Without one the three levels' keys fall in three slots. The
		// store decides across slots in two rounds (check all, then count
		// slot by slot), so a request that another exhausts a level
		// between the rounds is rejected while the other levels keep its
		// count: an overcount, never past a limit (docs/redis.md).
		// Sequential requests stay exact.
		checkHierarchy(t, hierarchy, cluster(t), false)
	})
}

// withHashTag puts every rule of a hierarchy file under one hash tag.
func withHashTag(file string) string {
	return strings.ReplaceAll(file, "    calendar:", "    hash_tag: llm-budgets\n    calendar:")
}

// levelsUsed is what the org, team and user levels have counted for req.
func levelsUsed(t *testing.T, e *rules.Engine, req rules.Request) [3]int64 {
	t.Helper()
	r, err := e.Usage(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out [3]int64
	for i, s := range r.Statuses {
		out[i] = s.Used
	}
	return out
}

// taggedHierarchy is hierarchy with its rules under one hash tag.
var taggedHierarchy = withHashTag(hierarchy)

// checkHierarchy runs the test on st; exact is false for a store that may
// count a concurrently rejected request on some levels (Redis Cluster
// across slots), where each level must count at least what it allowed and
// never past its limit.
func checkHierarchy(t *testing.T, file string, st store.Store, exact bool) {
	c := newEngClock()
	e := rules.NewEngine(mustRules(t, file), st, rules.WithClock(c.now))
	ctx := context.Background()
	used := func(req rules.Request) [3]int64 { t.Helper(); return levelsUsed(t, e, req) }
	decide := func(req rules.Request) rules.Result {
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

// TestWarningCrossedOnceUnderConcurrency: of many concurrent requests on one
// key, exactly one crosses a fixed window's level, on the memory store and
// on a real Redis.
func TestWarningCrossedOnceUnderConcurrency(t *testing.T) {
	t.Run("memory", func(t *testing.T) { checkWarningCrossedOnce(t, memstore.New(memstore.Options{})) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr()}, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		checkWarningCrossedOnce(t, rs)
	})
}

// checkWarningCrossedOnce runs 64 goroutines of 8 requests each on one key
// of a 400-per-hour fixed window with warn_at 0.5 in st, and fails unless
// exactly one allowed request crossed, and every allowed request from the
// 200th on saw the warning.
func checkWarningCrossedOnce(t *testing.T, st store.Store) {
	set := mustRules(t, `
domain: d
rules:
  - name: hourly
    match: {k: "*"}
    count_by: [k]
    limit: 400
    window: 1h
    algorithm: fixed-window
    warn_at: 0.5
`)
	e := rules.NewEngine(set, st)
	var crossed, warned, allowed atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 8 {
				r, err := e.Check(context.Background(), rules.Request{Descriptors: []rules.Descriptor{engDesc("k=" + t.Name())}})
				if err != nil {
					t.Error(err)
					return
				}
				if !r.Allowed {
					continue
				}
				allowed.Add(1)
				s := r.Statuses[0]
				if s.CrossedWarning {
					crossed.Add(1)
				}
				if s.Warning {
					warned.Add(1)
				}
				if s.Warning != (s.Used >= 200) {
					t.Errorf("used %d, warning %v", s.Used, s.Warning)
				}
			}
		}()
	}
	wg.Wait()
	if crossed.Load() != 1 || allowed.Load() != 400 || warned.Load() != 201 {
		t.Fatalf("%d allowed, %d in warning, %d crossed; want 400, 201 (the 200th to the 400th), 1", allowed.Load(), warned.Load(), crossed.Load())
	}
}
