package rules

import (
	"context"
	"errors"
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
		if st.Rule != OverrideRule || st.Limit != 2 || st.Window != time.Minute || st.Algorithm != "bounded-log" {
			t.Fatalf("override status: %+v", st)
		}
	}
	r := check(t, e, withOverride(2, time.Minute, "member=u1"))
	if r.Allowed || !slices.Equal(r.Rejected, []string{OverrideRule}) {
		t.Fatalf("third request over an override of 2: allowed=%v rejected=%v", r.Allowed, r.Rejected)
	}
	// The rules' counters were not touched: u1 still has per-member's 3.
	if got := allowedCount(t, e, one("member=u1"), 4); got != 3 {
		t.Fatalf("without the override u1 got %d of 4, want per-member's 3", got)
	}
	// A different override is a different limit with its own counter.
	if got := allowedCount(t, e, withOverride(4, time.Minute, "member=u1"), 5); got != 4 {
		t.Fatalf("override of 4: %d of 5 allowed", got)
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
		withOverride(1, MaxWindow+1, "member=a"),
		withOverride(-1, time.Second, "member=a"),
		withOverride(MaxLimit+1, time.Second, "member=a"),
		withOverride(1, -time.Second, "member=a"),
	}
	for _, req := range bad {
		if _, err := e.Check(context.Background(), req); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("Check with overrides %v: err = %v, want ErrInvalidRequest", req.Overrides, err)
		}
	}
}

// Distinct overrides are bounded: past MaxOverrides a new one is invalid,
// while those already in use keep working.
func TestOverridesAreBounded(t *testing.T) {
	e, _ := newTestEngine(t, composed)
	for i := range MaxOverrides {
		if _, err := e.Check(context.Background(), withOverride(int64(i+1), time.Minute, "member=a")); err != nil {
			t.Fatalf("override %d: %v", i, err)
		}
	}
	if _, err := e.Check(context.Background(), withOverride(MaxOverrides+1, time.Minute, "member=a")); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("override %d: err = %v, want ErrInvalidRequest", MaxOverrides+1, err)
	}
	if _, err := e.Check(context.Background(), withOverride(1, time.Minute, "member=b")); err != nil {
		t.Fatalf("an override already in use: %v", err)
	}
}
