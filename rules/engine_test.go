package rules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/memstore"
)

// clock is a virtual clock for engines under test.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func mustParse(t testing.TB, text string) *Set {
	t.Helper()
	s, err := Parse("test.yaml", []byte(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

func newTestEngine(t testing.TB, text string, opts ...EngineOption) (*Engine, *clock) {
	t.Helper()
	c := newClock()
	opts = append([]EngineOption{WithClock(c.now)}, opts...)
	return NewEngine(mustParse(t, text), memstore.New(memstore.Options{}), opts...), c
}

// desc builds a descriptor from "k=v" strings.
func desc(kv ...string) Descriptor {
	d := make(Descriptor, 0, len(kv))
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		d = append(d, Entry{k, v})
	}
	return d
}

func one(kv ...string) Request { return Request{Descriptors: []Descriptor{desc(kv...)}} }

func check(t testing.TB, e *Engine, req Request) Result {
	t.Helper()
	r, err := e.Check(context.Background(), req)
	if err != nil {
		t.Fatalf("Check(%v): %v", req, err)
	}
	return r
}

const composed = `
domain: shop
rules:
  - name: per-member
    match: {member: "*"}
    count_by: [member]
    limit: 3
    window: 1h
    algorithm: fixed-window
  - name: global
    count_by: global
    limit: 5
    window: 1h
    algorithm: fixed-window
`

// Several rules apply; all must pass, and a request rejected by one is
// counted by none.
func TestCompositionAllMustPassAndRejectedIsNotCounted(t *testing.T) {
	e, _ := newTestEngine(t, composed)
	// u1 uses its 3; the 4th is rejected by per-member only.
	for i := 0; i < 3; i++ {
		if r := check(t, e, one("member=u1")); !r.Allowed {
			t.Fatalf("request %d of u1 rejected: %+v", i, r)
		}
	}
	r := check(t, e, one("member=u1"))
	if r.Allowed || !slices.Equal(r.Rejected, []string{"per-member"}) {
		t.Fatalf("4th request of u1: allowed=%v rejected=%v, want rejected by per-member", r.Allowed, r.Rejected)
	}
	if len(r.Statuses) != 2 || r.Statuses[0].Rule != "per-member" || r.Statuses[1].Rule != "global" {
		t.Fatalf("statuses not in file order: %+v", r.Statuses)
	}
	if r.Tightest != 0 {
		t.Fatalf("tightest = %d, want 0 (the rejecting rule)", r.Tightest)
	}
	// The rejected request did not use the global allowance: 2 remain, so
	// u2 gets 2 through global, then global rejects u2's third.
	for i := 0; i < 2; i++ {
		if r := check(t, e, one("member=u2")); !r.Allowed {
			t.Fatalf("u2 request %d rejected: %+v", i, r.Rejected)
		}
	}
	r = check(t, e, one("member=u2"))
	if r.Allowed || !slices.Equal(r.Rejected, []string{"global"}) {
		t.Fatalf("u2 3rd: allowed=%v rejected=%v, want rejected by global", r.Allowed, r.Rejected)
	}
}

// Two reasons for rejection are two names.
func TestTwoRejectionsTwoNames(t *testing.T) {
	e, _ := newTestEngine(t, `
domain: d
rules:
  - name: a
    count_by: [member]
    limit: 1
    window: 1h
  - name: b
    count_by: global
    limit: 1
    window: 2h
`)
	check(t, e, one("member=u1"))
	r := check(t, e, one("member=u1"))
	if r.Allowed || !slices.Equal(r.Rejected, []string{"a", "b"}) {
		t.Fatalf("allowed=%v rejected=%v, want both a and b", r.Allowed, r.Rejected)
	}
	// The tightest is the rejecting status with the longest RetryAfter.
	if st := r.Statuses[r.Tightest]; st.Rule != "b" {
		t.Fatalf("tightest = %s (retry %v vs %v), want b", st.Rule, r.Statuses[0].Decision.RetryAfter, r.Statuses[1].Decision.RetryAfter)
	}
}

func TestTightestIsLeastRemainingRelative(t *testing.T) {
	e, _ := newTestEngine(t, `
domain: d
rules:
  - name: big
    count_by: global
    limit: 100
    window: 1h
    algorithm: fixed-window
  - name: small
    count_by: global
    limit: 4
    window: 1h
    algorithm: fixed-window
`)
	r := check(t, e, one("x=1"))
	// big: 99/100 left, small: 3/4 left -> small is tighter.
	if r.Statuses[r.Tightest].Rule != "small" {
		t.Fatalf("tightest = %s, want small", r.Statuses[r.Tightest].Rule)
	}
}

func TestNoRuleApplies(t *testing.T) {
	e, _ := newTestEngine(t, composed)
	r := check(t, e, Request{Domain: "other", Descriptors: []Descriptor{desc("member=u1")}})
	if !r.Allowed || r.Tightest != -1 || len(r.Statuses) != 0 {
		t.Fatalf("other domain: %+v, want allowed with no statuses", r)
	}
	r = check(t, e, Request{})
	if !r.Allowed || r.Tightest != -1 {
		t.Fatalf("empty request: %+v", r)
	}
}

const plans = `
domain: api
rules:
  - name: api-key
    match: {header:X-Api-Key: "*"}
    count_by: [header:x-api-key]
    limit: 2
    window: 1m
    algorithm: fixed-window
    overrides:
      - match: {plan: pro}
        limit: 5
      - match: {header:x-api-key: trusted}
        unlimited: true
      - match: {header:x-api-key: banned}
        limit: 0
`

func allowedCount(t *testing.T, e *Engine, req Request, n int) int {
	t.Helper()
	got := 0
	for i := 0; i < n; i++ {
		if check(t, e, req).Allowed {
			got++
		}
	}
	return got
}

func TestOverrides(t *testing.T) {
	e, _ := newTestEngine(t, plans)
	free := one("header:x-api-key=k1", "plan=free")
	pro := one("header:x-api-key=k2", "plan=pro")
	if got := allowedCount(t, e, free, 10); got != 2 {
		t.Errorf("free plan: %d allowed of 10, want 2", got)
	}
	if got := allowedCount(t, e, pro, 10); got != 5 {
		t.Errorf("pro plan: %d allowed of 10, want 5", got)
	}
	trusted := one("header:x-api-key=trusted", "plan=pro") // first matching override wins: pro
	if got := allowedCount(t, e, trusted, 10); got != 5 {
		t.Errorf("trusted with plan pro: %d allowed, want 5 (first matching override wins)", got)
	}
	trusted = one("header:x-api-key=trusted")
	if got := allowedCount(t, e, trusted, 100); got != 100 {
		t.Errorf("trusted: %d allowed of 100, want all", got)
	}
	r := check(t, e, trusted)
	if !r.Unlimited || r.Tightest != -1 || !r.Statuses[0].Unlimited {
		t.Errorf("trusted result: %+v, want Unlimited", r)
	}
	banned := one("header:x-api-key=banned")
	r = check(t, e, banned)
	if r.Allowed || r.Statuses[0].Decision.Reason == "" || r.Statuses[0].Limit != 0 {
		t.Errorf("banned: %+v, want rejected with limit 0 and a reason", r)
	}
	if r.Unlimited {
		t.Errorf("banned reported as unlimited")
	}
	// A request without the API key is not limited by the rule.
	if r := check(t, e, one("plan=pro")); len(r.Statuses) != 0 {
		t.Errorf("request without key matched: %+v", r.Statuses)
	}
}

func TestCost(t *testing.T) {
	e, _ := newTestEngine(t, `
domain: llm
rules:
  - name: tokens
    count_by: [tenant]
    limit: 1000
    window: 1m
    algorithm: fixed-window
    cost: {from: header:x-tokens, default: 100}
  - name: expensive
    match: {path: /report}
    count_by: [tenant]
    limit: 10
    window: 1m
    algorithm: fixed-window
    cost: 4
`)
	r := check(t, e, one("tenant=t1", "header:x-tokens=600"))
	if !r.Allowed || r.Statuses[0].Decision.Remaining != 400 {
		t.Fatalf("600 tokens: %+v", r.Statuses[0].Decision)
	}
	r = check(t, e, one("tenant=t1")) // default 100
	if !r.Allowed || r.Statuses[0].Decision.Remaining != 300 {
		t.Fatalf("default cost: %+v", r.Statuses[0].Decision)
	}
	r = check(t, e, one("tenant=t1", "header:x-tokens=301"))
	if r.Allowed {
		t.Fatalf("301 tokens with 300 left allowed")
	}
	for _, bad := range []string{"abc", "0", "-5", "1.5", "99999999999999999999"} {
		t.Run(bad, func(t *testing.T) {
			r = check(t, e, one("tenant=t1", "header:x-tokens="+bad))
			st := r.Statuses[0]
			if r.Allowed || st.Decision.Reason != algorithm.ReasonBadCost || !strings.Contains(st.Message(), "not a whole number") {
				t.Fatalf("cost %q: allowed=%v reason=%q message=%q, want rejected as bad_cost with a clear message", bad, r.Allowed, st.Decision.Reason, st.Message())
			}
		})
	}
	// The malformed requests were not counted: 300 still left.
	if r := check(t, e, one("tenant=t1", "header:x-tokens=300")); !r.Allowed {
		t.Fatalf("300 tokens with 300 left rejected: %+v", r.Statuses)
	}
	// Fixed cost 4 against 10: two pass, the third does not.
	rep := one("tenant=t2", "path=/report", "header:x-tokens=1")
	if got := allowedCount(t, e, rep, 3); got != 2 {
		t.Fatalf("fixed cost 4, limit 10: %d allowed of 3, want 2", got)
	}
	// Hits is the cost of rules without one.
	e2, _ := newTestEngine(t, composed)
	r = check(t, e2, Request{Descriptors: []Descriptor{desc("member=u1")}, Hits: 3})
	if r.Statuses[0].Decision.Remaining != 0 || r.Statuses[1].Decision.Remaining != 2 {
		t.Fatalf("hits 3: %+v", r.Statuses)
	}
}

func TestShadow(t *testing.T) {
	e, _ := newTestEngine(t, `
domain: d
rules:
  - name: trial
    count_by: [member]
    limit: 1
    window: 1h
    shadow: true
  - name: real
    count_by: [member]
    limit: 3
    window: 1h
`)
	for i := 0; i < 3; i++ {
		r := check(t, e, one("member=u1"))
		if !r.Allowed {
			t.Fatalf("request %d rejected: %v", i, r.Rejected)
		}
		if i > 0 && (!slices.Equal(r.Rejected, []string{"trial"}) || !r.Statuses[0].Shadow) {
			t.Fatalf("request %d: rejected=%v, want trial reported in shadow", i, r.Rejected)
		}
		// The shadow rule never becomes the tightest while a real one applies.
		if r.Statuses[r.Tightest].Rule != "real" {
			t.Fatalf("tightest is %s", r.Statuses[r.Tightest].Rule)
		}
	}
	if r := check(t, e, one("member=u1")); r.Allowed || !slices.Equal(r.Rejected, []string{"trial", "real"}) {
		t.Fatalf("4th: allowed=%v rejected=%v", r.Allowed, r.Rejected)
	}
}

func TestGlobalShadow(t *testing.T) {
	for _, c := range []struct {
		name string
		file string
		opts []EngineOption
	}{
		{"option", composed, []EngineOption{WithGlobalShadow(true)}},
		{"file", strings.Replace(composed, "domain: shop", "domain: shop\nshadow: true", 1), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, _ := newTestEngine(t, c.file, c.opts...)
			var last Result
			for i := 0; i < 10; i++ {
				last = check(t, e, one("member=u1"))
				if !last.Allowed {
					t.Fatalf("global shadow rejected request %d", i)
				}
			}
			if !slices.Equal(last.Rejected, []string{"per-member", "global"}) {
				t.Fatalf("rejected = %v, want both reported", last.Rejected)
			}
			if last.Tightest < 0 {
				t.Fatalf("no tightest under global shadow")
			}
		})
	}
}

// Counter keys cannot collide, whatever the values hold.
func TestKeysAreUnambiguous(t *testing.T) {
	s := mustParse(t, `
domain: d
rules:
  - name: r
    count_by: [a, b]
    limit: 1
    window: 1s
`)
	cases := [][2]string{
		{"x|b=y", "z"}, {"x", "b=y|z"}, {`x\`, "|b=y"}, {`x\|b`, "y"}, {"x=", "y"}, {"x", "=y"}, {"", ""}, {`\`, `\`},
	}
	seen := map[string][2]string{}
	for _, c := range cases {
		ks, err := s.Keys(one("a="+c[0], "b="+c[1]))
		if err != nil || len(ks) != 1 {
			t.Fatalf("Keys: %v %v", ks, err)
		}
		if prev, dup := seen[ks[0].Key]; dup {
			t.Fatalf("values %q and %q share key %q", prev, c, ks[0].Key)
		}
		seen[ks[0].Key] = c
	}
	// desc's "k=v" split: make sure the escaped separators stayed distinct
	// for entries whose keys hold separators too.
	k1, _ := ruleKey("d", s.rules[0], Descriptor{{"a", "1|b=2"}, {"b", "3"}})
	k2, _ := ruleKey("d", s.rules[0], Descriptor{{"a", "1"}, {"b", "2|b=3"}})
	if k1 == k2 {
		t.Fatalf("collision: %q", k1)
	}
	// The domain and rule name are part of the key.
	k3, _ := ruleKey("d|r", &rule{id: "x"}, nil)
	k4, _ := ruleKey("d", &rule{id: "r|x"}, nil)
	if k3 == k4 {
		t.Fatalf("domain/rule collision: %q", k3)
	}
}

func TestCountByMissingEntryDoesNotApply(t *testing.T) {
	e, _ := newTestEngine(t, composed)
	r := check(t, e, one("client=web"))
	if len(r.Statuses) != 1 || r.Statuses[0].Rule != "global" {
		t.Fatalf("statuses = %+v, want only global (no member entry)", r.Statuses)
	}
}

func TestMatchKinds(t *testing.T) {
	s := mustParse(t, `
domain: d
rules:
  - name: exact
    match: {path: /a/b}
    count_by: global
    limit: 1
    window: 1s
  - name: any
    match: {path: "*"}
    count_by: global
    limit: 1
    window: 1s
  - name: prefix
    match: {path: {prefix: /a/}}
    count_by: global
    limit: 1
    window: 1s
  - name: glob
    match: {path: "/v*/users/*/orders"}
    count_by: global
    limit: 1
    window: 1s
  - name: literal-star
    match: {path: {exact: "/x*"}}
    count_by: global
    limit: 1
    window: 1s
  - name: one-of
    match: {method: [GET, HEAD], path: {glob: "/a*"}}
    count_by: global
    limit: 1
    window: 1s
  - name: internal
    match: {ip: [{cidr: 10.0.0.0/8}, {cidr: "2001:db8::/32"}, {cidr: 192.0.2.7}]}
    count_by: global
    limit: 1
    window: 1s
`)
	for _, c := range []struct {
		d    Descriptor
		want []string
	}{
		{desc("path=/a/b"), []string{"exact", "any", "prefix"}},
		{desc("path=/a/b", "method=GET"), []string{"exact", "any", "prefix", "one-of"}},
		{desc("path=/a/bc", "method=POST"), []string{"any", "prefix"}},
		{desc("path=/v2/users/7/orders"), []string{"any", "glob"}},
		{desc("path=/v2/users/7/orders/x"), []string{"any"}},
		{desc("path=/x*"), []string{"any", "literal-star"}},
		{desc("path=/xy"), []string{"any"}},
		{desc("method=GET"), nil},
		{desc("ip=10.20.30.40"), []string{"internal"}},
		{desc("ip=::ffff:10.1.1.1"), []string{"internal"}},
		{desc("ip=2001:db8::1"), []string{"internal"}},
		{desc("ip=192.0.2.7"), []string{"internal"}},
		{desc("ip=192.0.2.8"), nil},
		{desc("ip=11.0.0.1"), nil},
		{desc("ip=not-an-ip"), nil},
	} {
		t.Run(fmt.Sprint(c.d), func(t *testing.T) {
			ks, err := s.Keys(Request{Descriptors: []Descriptor{c.d}})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, k := range ks {
				got = append(got, k.Rule)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("%v matched %v, want %v", c.d, got, c.want)
			}
		})
	}
}

func TestSeveralDescriptors(t *testing.T) {
	e, _ := newTestEngine(t, composed)
	// Two descriptors, two members: per-member applies to each; global
	// applies once per distinct key (both have the same global key).
	r := check(t, e, Request{Descriptors: []Descriptor{desc("member=a"), desc("member=b")}})
	var got []string
	for _, st := range r.Statuses {
		got = append(got, st.Rule+"@"+string(rune('0'+st.Descriptor)))
	}
	if !slices.Equal(got, []string{"per-member@0", "per-member@1", "global@0"}) {
		t.Fatalf("statuses = %v", got)
	}
}

func TestRequestBounds(t *testing.T) {
	e, _ := newTestEngine(t, composed)
	for name, req := range map[string]Request{
		"key":         one(strings.Repeat("k", maxKeyLen+1) + "=v"),
		"hits":        {Descriptors: []Descriptor{desc("member=u")}, Hits: -1},
		"descriptors": {Descriptors: make([]Descriptor, maxDescriptors+1)},
		"entries":     {Descriptors: []Descriptor{make(Descriptor, maxDescriptorEntries+1)}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := e.Check(context.Background(), req); !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("%s: oversized request: err = %v, want ErrInvalidRequest", name, err)
			}
		})
	}
}

// A client cannot escape its limit by sending a huge value: long values are
// counted by their digest, each its own bucket, and keys stay short.
func TestLongValuesAreLimitedByDigest(t *testing.T) {
	e, _ := newTestEngine(t, composed)
	long1 := strings.Repeat("x", 100000)
	long2 := long1[:99999] + "y"
	if got := allowedCount(t, e, one("member="+long1), 5); got != 3 {
		t.Fatalf("long member: %d of 5 allowed, want 3", got)
	}
	r := check(t, e, one("member="+long2))
	if !r.Allowed {
		t.Fatalf("a different long value shares the bucket")
	}
	if k := r.Statuses[0].Key; len(k) > 100 || !strings.Contains(k, "member==") {
		t.Fatalf("key for a long value: %q", k)
	}
	// A literal value that looks like a digest is escaped, so it cannot
	// reach the long value's bucket.
	k1, _ := ruleKey("d", &rule{id: "r", countBy: []string{"m"}}, Descriptor{{"m", long1}})
	lit := strings.TrimPrefix(k1, "d|r|m=")
	k2, _ := ruleKey("d", &rule{id: "r", countBy: []string{"m"}}, Descriptor{{"m", lit}})
	if k1 == k2 {
		t.Fatalf("literal %q collides with the digest key", lit)
	}
}

func TestReleaseConcurrency(t *testing.T) {
	e, _ := newTestEngine(t, `
domain: d
rules:
  - name: inflight
    count_by: [client]
    limit: 2
    algorithm: concurrency
`)
	req := one("client=c")
	first := check(t, e, req)
	if !first.Allowed || first.Lease == "" || !first.Holds() {
		t.Fatalf("first request: %+v, want allowed with a lease", first)
	}
	if allowedCount(t, e, req, 2) != 1 {
		t.Fatal("concurrency 2 did not allow exactly 2")
	}
	ctx := context.Background()
	// Another client's lease, a made-up one and a malformed one release
	// nothing.
	other := check(t, e, one("client=d"))
	for _, tc := range []struct {
		name, lease string
		bad         bool
	}{{"another client's", other.Lease, false}, {"made up", "0123456789ab0123456789ab", false}, {"malformed", "not-a-lease", true}} {
		held, err := e.Release(ctx, req, tc.lease)
		if held || errors.Is(err, ErrInvalidRequest) != tc.bad {
			t.Fatalf("release with %s lease: %v, %v", tc.name, held, err)
		}
	}
	if check(t, e, req).Allowed {
		t.Fatal("a foreign release freed a slot")
	}
	if held, err := e.Release(ctx, req, first.Lease); !held || err != nil {
		t.Fatalf("release with the holder's lease: %v, %v", held, err)
	}
	if held, err := e.Release(ctx, req, first.Lease); held || err != nil {
		t.Fatalf("second release of the same lease: %v, %v", held, err)
	}
	if !check(t, e, req).Allowed {
		t.Fatal("released slot not reusable")
	}
	if check(t, e, req).Allowed {
		t.Fatal("3rd in flight allowed: the double release freed a slot")
	}
}

// Window expiry works through the engine's clock.
func TestClock(t *testing.T) {
	e, c := newTestEngine(t, composed)
	for i := 0; i < 3; i++ {
		check(t, e, one("member=u1"))
	}
	if check(t, e, one("member=u1")).Allowed {
		t.Fatal("over the limit allowed")
	}
	c.advance(time.Hour + time.Second)
	if !check(t, e, one("member=u1")).Allowed {
		t.Fatal("not allowed after the window")
	}
}

// A rule that blocks, or a malformed cost, rejects through the store with a
// cost above the limit: for every algorithm nothing is counted, by that rule
// or by the others.
func TestLocalRejectionCountsNothing(t *testing.T) {
	for _, alg := range algorithm.Names() {
		t.Run(string(alg), func(t *testing.T) {
			e, _ := newTestEngine(t, fmt.Sprintf(`
domain: d
rules:
  - name: r
    count_by: [member]
    limit: 3
    window: 1m
    algorithm: %s
    cost: {from: header:x-cost, default: 1}
    overrides:
      - match: {member: banned}
        limit: 0
  - name: other
    count_by: global
    limit: 3
    window: 1m
    algorithm: fixed-window
`, alg))
			for i := 0; i < 5; i++ {
				if r := check(t, e, one("member=u", "header:x-cost=lots")); r.Allowed {
					t.Fatalf("malformed cost allowed")
				}
				r := check(t, e, one("member=banned"))
				if r.Allowed || r.Statuses[0].Limit != 0 {
					t.Fatalf("blocked member allowed: %+v", r)
				}
			}
			if got := allowedCount(t, e, one("member=u"), 5); got != 3 {
				t.Fatalf("%d of 5 allowed after rejected requests, want 3 (none counted)", got)
			}
		})
	}
}

// The stack the issue describes: per member, per tenant above it, global
// above both, and a per-endpoint limit beside them.
func TestFourLevelStack(t *testing.T) {
	e, _ := newTestEngine(t, `
domain: d
rules:
  - {name: member, count_by: [member], limit: 4, window: 1h, algorithm: fixed-window}
  - {name: tenant, count_by: [tenant], limit: 6, window: 1h, algorithm: fixed-window}
  - {name: global, count_by: global, limit: 9, window: 1h, algorithm: fixed-window}
  - {name: export, match: {path: /export}, count_by: [tenant], limit: 1, window: 1h, algorithm: fixed-window}
`)
	req := func(tenant, member, path string) Request {
		return one("tenant="+tenant, "member="+member, "path="+path)
	}
	steps := []struct {
		r        Request
		n        int
		allowed  int
		rejected []string // of the last request
	}{
		{req("a", "a1", "/list"), 5, 4, []string{"member"}},   // member cap
		{req("a", "a2", "/list"), 3, 2, []string{"tenant"}},   // tenant a: 6
		{req("b", "b1", "/export"), 2, 1, []string{"export"}}, // endpoint
		{req("b", "b2", "/list"), 3, 2, []string{"global"}},   // global 9 = 4+2+1+2
		{req("c", "c1", "/export"), 1, 0, []string{"global"}},
	}
	for i, s := range steps {
		var last Result
		got := 0
		for j := 0; j < s.n; j++ {
			last = check(t, e, s.r)
			if last.Allowed {
				got++
			}
		}
		if got != s.allowed || !slices.Equal(last.Rejected, s.rejected) {
			t.Fatalf("step %d: %d allowed (want %d), last rejected %v (want %v)", i, got, s.allowed, last.Rejected, s.rejected)
		}
		if !last.Allowed && last.Statuses[last.Tightest].Rule != s.rejected[0] {
			t.Fatalf("step %d: tightest %s", i, last.Statuses[last.Tightest].Rule)
		}
	}
	// b's second export is over two limits at once: two names, in file order.
	r := check(t, e, req("b", "b1", "/export"))
	if !slices.Equal(r.Rejected, []string{"global", "export"}) {
		t.Fatalf("b's second export: rejected %v, want global and export", r.Rejected)
	}
}
