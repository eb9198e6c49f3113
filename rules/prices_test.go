package rules

import (
	"context"
	"errors"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

const pricedRules = `
domain: llm
prices:
  unit: USD cent
  models:
    big:   {input: 250, output: 1000, cached_input: 125}
    small: {input: 15, output: 60.000001}
rules:
  - name: monthly-spend
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 5000
    calendar: {period: month, zone: UTC}
    cost: {usage: money}
    charge_after_response: true
  - name: input-tokens
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 2000000
    window: 24h
    algorithm: fixed-window
    cost: {usage: input_tokens}
    charge_after_response: true
  - name: output-tokens
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 500000
    window: 24h
    algorithm: fixed-window
    cost: {usage: output_tokens}
    charge_after_response: true
  - name: requests
    match: {user: "*"}
    count_by: [user]
    limit: 1000
    window: 1m
`

// TestPricesParsed: the table's decimals are kept exactly; every misuse
// is an error that says what to write.
func TestPricesParsed(t *testing.T) {
	s := mustParse(t, pricedRules)
	if got := s.prices.models["small"]; got != (modelPrice{input: 15_000_000, output: 60_000_001, cached: 15_000_000}) {
		t.Fatalf("small: %+v", got)
	}
	if got := s.Rules()[0].Cost; got != "usage: money (USD cent)" {
		t.Fatalf("RuleInfo.Cost %q", got)
	}
	rule := "rules:\n  - name: r\n    match: {k: \"*\"}\n    count_by: [k]\n    limit: 10\n    window: 1m\n    cost: {usage: money}\n"
	for _, c := range []struct{ text, want string }{
		{"domain: d\n" + rule, "needs a price table"},
		{"domain: d\nprices: {models: {m: {input: 1.0000001, output: 1}}}\n" + rule, "at most six decimals"},
		{"domain: d\nprices: {models: {m: {input: -1, output: 1}}}\n" + rule, "a price must be a number from 0"},
		{"domain: d\nprices: {models: {m: {input: 1}}}\n" + rule, "output is missing"},
		{"domain: d\nprices: {models: {m: {input: 1, output: 2, cache: 1}}}\n" + rule, `unknown field "cache"`},
		{"domain: d\nprices: {unit: x}\n" + rule, "models is missing"},
		{"domain: d\nprices: {models: {m: {input: 1, output: 1}}}\n" + strings.Replace(rule, "usage: money", "usage: dollars", 1), `"dollars" is not one of`},
		{"domain: d\nprices: {models: {m: {input: 1, output: 1}}}\n" + strings.Replace(rule, "usage: money", "usage: money, from: x", 1), "from or usage, not both"},
	} {
		if _, err := Parse("r.yaml", []byte(c.text)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.text, err, c.want)
		}
	}
}

// TestPricedRoundsUp: a cost is the exact sum of tokens times prices,
// rounded up to a whole unit: never below the exact value, less than one
// unit above it; compared with big-integer arithmetic on random usage.
func TestPricedRoundsUp(t *testing.T) {
	p := modelPrice{input: 250_000_000, output: 1000_000_000, cached: 125_000_000}
	for _, c := range []struct {
		u    TokenUsage
		want uint64
	}{
		{TokenUsage{InputTokens: 1}, 1},                                      // 0.00025 of a unit
		{TokenUsage{InputTokens: 4000, OutputTokens: 1000}, 2},               // exactly 1 + 1
		{TokenUsage{InputTokens: 4001, OutputTokens: 1000}, 3},               // 2.00025
		{TokenUsage{CachedInputTokens: 8000}, 1},                             // exactly 1
		{TokenUsage{InputTokens: maxLimit, OutputTokens: maxLimit}, 5368710}, // (2^32-2)·1250/10^6 = 5368709.1175, rounded up
		{TokenUsage{}, 0},
	} {
		if got := priced(c.u, p); got != c.want {
			t.Errorf("priced(%+v) = %d, want %d", c.u, got, c.want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		u := TokenUsage{InputTokens: r.Int64N(maxLimit), OutputTokens: r.Int64N(1 << r.IntN(32)), CachedInputTokens: r.Int64N(1 << r.IntN(32))}
		mp := modelPrice{input: r.Int64N(maxPrice * priceScale), output: r.Int64N(1 << r.IntN(40)), cached: r.Int64N(1 << r.IntN(40))}
		exact := new(big.Int)
		for _, t := range [3][2]int64{{u.InputTokens, mp.input}, {u.OutputTokens, mp.output}, {u.CachedInputTokens, mp.cached}} {
			exact.Add(exact, new(big.Int).Mul(big.NewInt(t[0]), big.NewInt(t[1])))
		}
		q, m := new(big.Int).DivMod(exact, big.NewInt(priceScale*tokenScale), new(big.Int))
		if m.Sign() > 0 {
			q.Add(q, big.NewInt(1))
		}
		want := uint64(1 << 63)
		if q.IsUint64() && q.Uint64() < want {
			want = q.Uint64()
		}
		if got := priced(u, mp); got != want {
			t.Fatalf("priced(%+v, %+v) = %d, want %d", u, mp, got, want)
		}
	}
}

// TestPricedBudget: a tenant's monthly money budget, its input and output
// token limits and its request limit, charged from usage given in the
// request (the JSON API and Go) and from RLS-style descriptors (model and
// tokens entries, hits the count); an unknown model is an invalid request
// and charges nothing.
func TestPricedBudget(t *testing.T) {
	e, c := newTestEngine(t, pricedRules)
	c.ns.Store(time.Date(2025, 6, 10, 0, 0, 0, 0, time.UTC).UnixNano())
	ctx := context.Background()
	acme := []Descriptor{desc("tenant=acme")}
	used := func() map[string]int64 {
		t.Helper()
		r, err := e.Usage(ctx, Request{Descriptors: acme})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, s := range r.Statuses {
			out[s.Rule] = s.Used
		}
		return out
	}
	// The check before the response counts nothing (Envoy AI Gateway's
	// hits_addend 0); the charges after it name the tenant only, so the
	// request rule (by user) does not count them.
	if r := check(t, e, Request{Descriptors: append(acme, desc("user=u1")), Peek: true}); !r.Allowed || len(r.Statuses) != 4 {
		t.Fatalf("check: %+v", r)
	}
	// 10,000 input, 2,000 cached, 3,000 output tokens of big: 2.5 + 0.25 + 3 = 5.75 -> 6 cents.
	u := TokenUsage{Model: "big", InputTokens: 10_000, CachedInputTokens: 2_000, OutputTokens: 3_000}
	if _, err := e.Charge(ctx, Request{Descriptors: acme, Usage: u}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"monthly-spend": 6, "input-tokens": 10_000, "output-tokens": 3_000}
	if got := used(); !equalUsed(got, want) {
		t.Fatalf("after a charge of big usage: %v, want %v", got, want)
	}
	// Over RLS the usage comes as descriptors, one per kind of tokens.
	rls := func(model, kind string, n int64) error {
		_, err := e.Charge(ctx, Request{Descriptors: []Descriptor{desc("tenant=acme", "model="+model, "tokens="+kind)}, Hits: n})
		return err
	}
	if err := rls("small", "input", 100_000); err != nil { // 1.5 -> 2
		t.Fatal(err)
	}
	if err := rls("small", "output", 50_000); err != nil { // 3.00000005 -> 4
		t.Fatal(err)
	}
	want = map[string]int64{"monthly-spend": 12, "input-tokens": 110_000, "output-tokens": 53_000}
	if got := used(); !equalUsed(got, want) {
		t.Fatalf("after RLS charges: %v, want %v", got, want)
	}
	// Two descriptors of one request with the same count are both charged.
	if _, err := e.Charge(ctx, Request{Descriptors: []Descriptor{desc("tenant=acme", "model=big", "tokens=input"),
		desc("tenant=acme", "model=big", "tokens=output")}, Hits: 1000}); err != nil {
		t.Fatal(err)
	}
	want = map[string]int64{"monthly-spend": 12 + 1 + 1, "input-tokens": 111_000, "output-tokens": 54_000}
	if got := used(); !equalUsed(got, want) {
		t.Fatalf("after a two-descriptor charge: %v, want %v", got, want)
	}
	for _, bad := range []Request{
		{Descriptors: acme, Usage: TokenUsage{Model: "nope", InputTokens: 5}},
		{Descriptors: []Descriptor{desc("tenant=acme", "model=nope", "tokens=input")}, Hits: 5},
		{Descriptors: []Descriptor{desc("tenant=acme", "model=big", "tokens=images")}, Hits: 5},
		{Descriptors: []Descriptor{desc("tenant=acme", "tokens=input")}, Hits: 5},
		{Descriptors: acme, Usage: TokenUsage{Model: "big", InputTokens: -1}},
	} {
		if _, err := e.Charge(ctx, bad); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%+v: error %v, want ErrInvalidRequest", bad, err)
		}
		if _, err := e.Check(ctx, bad); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("check %+v: error %v, want ErrInvalidRequest", bad, err)
		}
	}
	if got := used(); !equalUsed(got, want) {
		t.Fatalf("invalid requests charged: %v, want %v", got, want)
	}
	// Spent: the check before the next request (a peek) rejects on the
	// money rules.
	if _, err := e.Charge(ctx, Request{Descriptors: acme, Usage: TokenUsage{Model: "big", OutputTokens: 5_000_000}}); err != nil {
		t.Fatal(err)
	}
	r := check(t, e, Request{Descriptors: append(acme, desc("user=u1")), Peek: true})
	if r.Allowed || r.Statuses[0].Decision.Allowed || r.Statuses[3].Rule != "requests" || !r.Statuses[3].Decision.Allowed {
		t.Fatalf("a check after the budget was spent: %+v", r.Statuses)
	}
}

func equalUsed(got, want map[string]int64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
