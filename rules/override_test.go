package rules

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
)

// withOverride is one(kv...) with a limit override on its descriptor.
func withOverride(limit int64, window time.Duration, kv ...string) Request {
	r := one(kv...)
	r.Overrides = []Override{{Limit: limit, Window: window}}
	return r
}

// An override replaces the rules its descriptor matches, keeps its own
// counter, and leaves descriptors without one to the rules.
func TestOverrideReplacesMatchingRules(t *testing.T) {
	e, c := newTestEngine(t, composed)
	for i := range 2 {
		r := check(t, e, withOverride(2, time.Minute, "member=u1"))
		if !r.Allowed || len(r.Statuses) != 1 {
			t.Fatalf("request %d under the override: %+v", i, r)
		}
		st := r.Statuses[0]
		if st.Rule != overrideRule || st.Limit != 2 || st.Window != time.Minute || st.Algorithm != "bounded-log" {
			t.Fatalf("override status: %+v", st)
		}
	}
	r := check(t, e, withOverride(2, time.Minute, "member=u1"))
	if r.Allowed || !slices.Equal(r.Rejected, []string{overrideRule}) {
		t.Fatalf("third request over an override of 2: allowed=%v rejected=%v", r.Allowed, r.Rejected)
	}
	// The rules' counters were not touched: u1 still has per-member's 3.
	if got := allowedCount(t, e, one("member=u1"), 4); got != 3 {
		t.Fatalf("without the override u1 got %d of 4, want per-member's 3", got)
	}
	// Overrides of one window count in one counter (as
	// envoyproxy/ratelimit's keys leave the limit out): the override of 4
	// sees the 2 counted under the override of 2.
	if got := allowedCount(t, e, withOverride(4, time.Minute, "member=u1"), 5); got != 2 {
		t.Fatalf("override of 4 after 2 counted under an override of 2: %d of 5 allowed, want 2", got)
	}
	// The window is the override's.
	c.advance(time.Minute)
	if r := check(t, e, withOverride(2, time.Minute, "member=u1")); !r.Allowed {
		t.Fatalf("a minute later the override of 2 per minute still rejects: %+v", r)
	}
}

// An override applies to a descriptor no rule matches, in either format,
// and limit 0 rejects everything.
func TestOverrideWithoutMatchingRule(t *testing.T) {
	e, _ := newTestEngine(t, composed)
	// No rule counts by path, but global matches every descriptor: the
	// override replaces it too.
	if got := allowedCount(t, e, withOverride(3, time.Hour, "path=/x"), 5); got != 3 {
		t.Fatalf("override of 3 on an unmatched descriptor: %d of 5 allowed", got)
	}
	if got := allowedCount(t, e, withOverride(0, time.Hour, "path=/y"), 2); got != 0 {
		t.Fatalf("override of 0: %d allowed", got)
	}
	env := envoyEngine(t, "edge.yaml")
	if got := allowedCount(t, env, withOverride(2, time.Second, "remote_address=10.0.0.1"), 4); got != 2 {
		t.Fatalf("envoy format: override of 2 on an unlimited descriptor: %d of 4 allowed", got)
	}
	if got := allowedCount(t, env, withOverride(0, 0, "remote_address=10.0.0.1"), 4); got != 4 {
		t.Fatalf("a zero Override must leave the descriptor to the rules (unlimited): %d of 4 allowed", got)
	}
}

// Overrides that do not fit the request or the bounds are rejected.
func TestOverrideBounds(t *testing.T) {
	e, _ := newTestEngine(t, composed)
	bad := []Request{
		{Descriptors: []Descriptor{desc("member=a"), desc("member=b")}, Overrides: []Override{{Limit: 1, Window: time.Second}}},
		withOverride(1, maxWindow+1, "member=a"),
		withOverride(-1, time.Second, "member=a"),
		withOverride(maxLimit+1, time.Second, "member=a"),
		withOverride(1, -time.Second, "member=a"),
	}
	for _, req := range bad {
		t.Run(fmt.Sprint(req.Overrides), func(t *testing.T) {
			if _, err := e.Check(context.Background(), req); !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("Check with overrides %v: err = %v, want ErrInvalidRequest", req.Overrides, err)
			}
		})
	}
}

// More distinct overrides than the table holds are all decided: the least
// recently used are evicted, no request is refused.
func TestOverrideTableEvictsInsteadOfRefusing(t *testing.T) {
	e, _ := newTestEngine(t, composed)
	for i := range 300 {
		if _, err := e.Check(context.Background(), withOverride(int64(i+1), time.Minute, "member=a")); err != nil {
			t.Fatalf("distinct override %d: %v", i+1, err)
		}
	}
	if _, err := e.Check(context.Background(), withOverride(1000, time.Minute, "member=b")); err != nil {
		t.Fatalf("a new override after 300 others: %v", err)
	}
}

// A flood of 100,000 distinct overrides evicts a victim's override from
// the table, and the victim is still at its limit when it comes back: the
// rebuilt override finds the counters the evicted one left in the store.
//
// The first thousand of the flood are decided in the store like the
// victim's; the rest go through Keys, which builds and evicts overrides
// exactly as Check does without registering 100,000 limits in the memory
// store (each distinct override value is a limit of its own there; see
// docs/security.md for what that costs).
func TestOverrideEvictionKeepsVictimAtLimit(t *testing.T) {
	e, c := newTestEngine(t, composed)
	victim := withOverride(5, time.Minute, "member=victim")
	if got := allowedCount(t, e, victim, 5); got != 5 {
		t.Fatalf("victim: %d of 5 allowed under an override of 5", got)
	}
	const flood, decided = 100_000, 1_000
	set := e.Set()
	for i := range flood {
		req := withOverride(int64(100+i), time.Minute, "member=attacker")
		var err error
		if i < decided {
			_, err = e.Check(context.Background(), req)
		} else {
			_, err = set.Keys(req)
		}
		if err != nil {
			t.Fatalf("flood override %d: %v", i, err)
		}
	}
	st := set.overrideStats()
	if st.Entries > maxOverrides || st.Bytes > maxOverrideBytes {
		t.Fatalf("table past its bounds: %+v", st)
	}
	if st.Evicted < flood+1-maxOverrides {
		t.Fatalf("evicted %d overrides, want at least %d", st.Evicted, flood+1-maxOverrides)
	}
	if _, held := set.overrides.m[Override{Limit: 5, Window: time.Minute}]; held {
		t.Fatal("the victim's override is still in the table; the flood did not evict it")
	}
	c.advance(time.Second)
	r := check(t, e, victim)
	if r.Allowed || r.Statuses[0].Decision.Remaining != 0 {
		t.Fatalf("victim's sixth request after its override was evicted and rebuilt: %+v", r.Statuses)
	}
	c.advance(time.Minute)
	if got := allowedCount(t, e, victim, 6); got != 5 {
		t.Fatalf("a window later the victim got %d of 6, want its 5", got)
	}
}

// The table is bounded in bytes as well as entries: with room for fewer
// entries in bytes than in number, the bytes decide.
func TestOverrideTableBoundedInBytes(t *testing.T) {
	var tab overrideTable
	tab.maxEntries, tab.maxBytes = 1000, 10*overrideEntryBytes
	for i := range 50 {
		if _, err := tab.rule(Override{Limit: int64(i + 1), Window: time.Second}); err != nil {
			t.Fatal(err)
		}
		if tab.bytes > tab.maxBytes || len(tab.m) > 10 {
			t.Fatalf("after %d overrides: %d entries, %d bytes (bound %d)", i+1, len(tab.m), tab.bytes, tab.maxBytes)
		}
	}
	// The most recently used stays; the least recently used goes first.
	if _, err := tab.rule(Override{Limit: 41, Window: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.rule(Override{Limit: 1000, Window: time.Second}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		limit int64
		held  bool
	}{{41, true}, {1000, true}, {42, false}, {50, true}, {1, false}} {
		if _, ok := tab.m[Override{Limit: want.limit, Window: time.Second}]; ok != want.held {
			t.Errorf("override %d held = %v, want %v", want.limit, ok, want.held)
		}
	}
}

// overrideEntryBytes covers what building one override allocates.
func TestOverrideEntryBytes(t *testing.T) {
	var tab overrideTable
	tab.maxEntries, tab.maxBytes = 1<<20, 1<<40
	const n = 2000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		if _, err := tab.rule(Override{Limit: int64(i + 1), Window: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	per := int64(after.TotalAlloc-before.TotalAlloc) / n
	if per > overrideEntryBytes {
		t.Fatalf("building an override allocates %d bytes; overrideEntryBytes is %d", per, overrideEntryBytes)
	}
	t.Logf("an override allocates %d bytes, accounted %d", per, overrideEntryBytes)
}

// The override policies: allow leaves a request alone, ignore drops its
// overrides, reject refuses a request that carries one.
func TestOverridePolicyApply(t *testing.T) {
	for _, name := range []string{"allow", "ignore", "reject"} {
		t.Run(name, func(t *testing.T) {
			var p OverridePolicy
			err := p.UnmarshalText([]byte(name))
			if err != nil || p.String() != name {
				t.Fatalf("UnmarshalText(%q) = %v, %v", name, p, err)
			}
			req := withOverride(4294967294, time.Hour, "client=c1")
			err = p.Apply(&req)
			switch p {
			case OverridesAllow:
				if err != nil || len(req.Overrides) != 1 {
					t.Fatalf("allow: %v %v", req.Overrides, err)
				}
			case OverridesIgnore:
				if err != nil || req.Overrides != nil {
					t.Fatalf("ignore: %v %v", req.Overrides, err)
				}
			case OverridesReject:
				if !errors.Is(err, errOverrideRefused) || !errors.Is(err, ErrInvalidRequest) {
					t.Fatalf("reject: err = %v", err)
				}
				zero := Request{Descriptors: req.Descriptors, Overrides: []Override{{}}}
				if err := p.Apply(&zero); err != nil {
					t.Fatalf("reject refused a request whose overrides are all zero: %v", err)
				}
			}
		})
	}
	var p OverridePolicy
	if err := p.UnmarshalText([]byte("yes")); err == nil {
		t.Fatal("UnmarshalText accepted yes")
	}
}
