package rls

import (
	"context"
	"net"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

const budgetRules = `
domain: ai
rules:
  - name: tokens
    match: {budget: tokens, tenant: "*"}
    count_by: [tenant]
    limit: 10000
    window: 1m
    charge_after_response: true
  - name: requests
    match: {client: "*"}
    count_by: [client]
    limit: 1000
    window: 1m
`

func dialRules(t *testing.T, text string) rlsv3.RateLimitServiceClient {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	New(rules.NewEngine(set, memstore.New(memstore.Options{})), nil).Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// budget is the descriptor of Envoy's AI gateway calls, with its addend.
func budget(tenant string, addend uint64) *commonv3.RateLimitDescriptor {
	d := desc("budget", "tokens", "tenant", tenant)
	d.HitsAddend = wrapperspb.UInt64(addend)
	return d
}

// The sequence of issue 12 over RLS: a check with hits_addend 0 counts
// nothing, a charge after the response counts even past the limit, and the
// key is then rejected until the debt leaves the window.
func TestTokenBudgetChargedAfterResponse(t *testing.T) {
	c := dialRules(t, budgetRules)
	call := func(addend uint64) *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ai",
			Descriptors: []*commonv3.RateLimitDescriptor{budget("acme", addend)}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0]
	}
	steps := []struct {
		addend    uint64
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}{
		{0, rlsv3.RateLimitResponse_OK, 10000}, // check: nothing counted
		{0, rlsv3.RateLimitResponse_OK, 10000},
		{8000, rlsv3.RateLimitResponse_OK, 2000}, // charge
		{0, rlsv3.RateLimitResponse_OK, 2000},
		{8000, rlsv3.RateLimitResponse_OK, 0},      // charged past the limit: counted
		{0, rlsv3.RateLimitResponse_OVER_LIMIT, 0}, // in debt: rejected
	}
	for i, s := range steps {
		st := call(s.addend)
		if st.Code != s.code || st.LimitRemaining != s.remaining {
			t.Fatalf("step %d (hits_addend %d): %v remaining %d, want %v remaining %d",
				i, s.addend, st.Code, st.LimitRemaining, s.code, s.remaining)
		}
	}
}

// Without charge_after_response, a descriptor hits_addend of 0 still only
// checks, and an addend is decided as usual.
func TestZeroAddendChecksOrdinaryRule(t *testing.T) {
	c := dialRules(t, budgetRules)
	req := func(addend uint64) *rlsv3.RateLimitResponse {
		d := desc("client", "acme")
		d.HitsAddend = wrapperspb.UInt64(addend)
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ai",
			Descriptors: []*commonv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if r := req(0); r.Statuses[0].LimitRemaining != 1000 {
		t.Fatalf("check: remaining %d, want 1000", r.Statuses[0].LimitRemaining)
	}
	if r := req(999); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("999: %v", r)
	}
	if r := req(2); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("2 with 1 left: %v, want OVER_LIMIT (an ordinary rule decides)", r.OverallCode)
	}
	// A request without hits_addend anywhere still counts 1.
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ai",
		Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "globex")}})
	if err != nil || resp.Statuses[0].LimitRemaining != 999 {
		t.Fatalf("unset addend: %v %v, want 999 remaining", resp, err)
	}
}

// A check (hits_addend 0) and a weighted descriptor in one request: the
// check counts nothing, the other counts its weight.
func TestPeekMixedWithWeights(t *testing.T) {
	c := dialRules(t, budgetRules)
	check := desc("client", "a")
	check.HitsAddend = wrapperspb.UInt64(0)
	weighted := desc("client", "b")
	weighted.HitsAddend = wrapperspb.UInt64(10)
	for i, want := range [][2]uint32{{1000, 990}, {1000, 980}} {
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ai",
			Descriptors: []*commonv3.RateLimitDescriptor{check, weighted}})
		if err != nil {
			t.Fatal(err)
		}
		if got := [2]uint32{resp.Statuses[0].LimitRemaining, resp.Statuses[1].LimitRemaining}; got != want {
			t.Fatalf("call %d: remaining %v, want %v", i, got, want)
		}
	}
}

const pricedRules = `
domain: ai
prices:
  unit: USD cent
  models:
    big: {input: 250, output: 1000}
rules:
  - name: spend
    match: {budget: money, tenant: "*"}
    count_by: [tenant]
    limit: 100
    calendar: {period: month}
    cost: {usage: money}
    charge_after_response: true
`

// priced is a descriptor of Envoy's AI gateway stream-done call that gives
// one kind of tokens of a model, the count as its addend.
func priced(tenant, model, kind string, addend uint64) *commonv3.RateLimitDescriptor {
	d := desc("budget", "money", "tenant", tenant, "model", model, "tokens", kind)
	d.HitsAddend = wrapperspb.UInt64(addend)
	return d
}

// TestMoneyBudgetFromTokenDescriptors: the stream-done call's input and
// output descriptors (different addends, so decided apart) are each priced
// and rounded up; an unpriced model is INVALID_ARGUMENT; the check with
// addend 0 then sees what is left.
func TestMoneyBudgetFromTokenDescriptors(t *testing.T) {
	c := dialRules(t, pricedRules)
	ctx := context.Background()
	// 10,001 input tokens at 250 per million: 2.50025 -> 3; 3,000 output at 1,000: 3.
	if _, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*commonv3.RateLimitDescriptor{
		priced("acme", "big", "input", 10001), priced("acme", "big", "output", 3000)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*commonv3.RateLimitDescriptor{
		priced("acme", "small", "input", 10)}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an unpriced model: %v, want INVALID_ARGUMENT", err)
	}
	d := desc("budget", "money", "tenant", "acme")
	d.HitsAddend = wrapperspb.UInt64(0)
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*commonv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.Statuses[0]; st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetLimitRemaining() != 94 {
		t.Fatalf("check after 3 + 3 cents of 100: %v, want OK with 94 left", st)
	}
}
