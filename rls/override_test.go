package rls

import (
	"fmt"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/rules"
)

// withLimit is desc(kv...) carrying Envoy's per-descriptor limit override.
func withLimit(rpu uint32, unit typev3.RateLimitUnit, mult *wrapperspb.UInt32Value, kv ...string) *commonv3.RateLimitDescriptor {
	d := desc(kv...)
	d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit, UnitMultiplier: mult}
	return d
}

// A descriptor's limit override replaces the rule it matches, over a real
// gRPC connection; the other descriptors keep their rules.
func TestLimitOverride(t *testing.T) {
	c, _ := dial(t)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
		withLimit(1, typev3.RateLimitUnit_HOUR, nil, "client", "acme"),
		desc("path", "/loan/list"),
	}}
	resp, err := c.ShouldRateLimit(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	s := resp.Statuses[0]
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || s.CurrentLimit.GetName() != "" ||
		s.CurrentLimit.GetRequestsPerUnit() != 1 || s.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR ||
		s.LimitRemaining != 0 {
		t.Fatalf("first call under an override of 1 per hour: %v", resp)
	}
	if p := resp.Statuses[1]; p.CurrentLimit.GetName() != "per-path" {
		t.Fatalf("the descriptor without an override lost its rule: %v", p)
	}
	resp, err = c.ShouldRateLimit(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second call over an override of 1 per hour: %v", resp)
	}
	// The per-client rule (3 a minute) still has its whole allowance.
	plain := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "acme")}}
	resp, err = c.ShouldRateLimit(ctx(t), plain)
	if err != nil || resp.Statuses[0].LimitRemaining != 2 || resp.Statuses[0].CurrentLimit.GetName() != "per-client" {
		t.Fatalf("without the override: %v %v", resp, err)
	}
	// unit_multiplier lengthens the window: 2 per 30 seconds.
	mult := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
		withLimit(2, typev3.RateLimitUnit_SECOND, wrapperspb.UInt32(30), "client", "other"),
	}}
	resp, err = c.ShouldRateLimit(ctx(t), mult)
	if err != nil {
		t.Fatal(err)
	}
	if l := resp.Statuses[0].CurrentLimit; l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || l.GetUnitMultiplier().GetValue() != 30 || l.GetRequestsPerUnit() != 2 {
		t.Fatalf("override of 2 per 30 s reported as %v", l)
	}
}

// With per-descriptor hits_addend the descriptors are checked in groups;
// the override follows its descriptor into its group.
func TestLimitOverrideWithHitsAddend(t *testing.T) {
	c, _ := dial(t)
	heavy := withLimit(3, typev3.RateLimitUnit_HOUR, nil, "client", "heavy")
	heavy.HitsAddend = wrapperspb.UInt64(2)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("path", "/loan/x"), heavy}}
	resp, err := c.ShouldRateLimit(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.Statuses[1]; s.CurrentLimit.GetName() != "" || s.LimitRemaining != 1 {
		t.Fatalf("override with hits_addend 2: %v", s)
	}
	if s := resp.Statuses[0]; s.CurrentLimit.GetName() != "per-path" || s.LimitRemaining != 99 {
		t.Fatalf("other descriptor: %v", s)
	}
	resp, err = c.ShouldRateLimit(ctx(t), req)
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second call, 4 of 3: %v %v", resp, err)
	}
}

func TestLimitOverrideInvalid(t *testing.T) {
	c, _ := dial(t)
	for i, d := range []*commonv3.RateLimitDescriptor{
		withLimit(5, typev3.RateLimitUnit_UNKNOWN, nil, "client", "a"),
		withLimit(5, typev3.RateLimitUnit_SECOND, wrapperspb.UInt32(0), "client", "a"),
		withLimit(5, typev3.RateLimitUnit_YEAR, wrapperspb.UInt32(2), "client", "a"),
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			_, err := c.ShouldRateLimit(ctx(t), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{d}})
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("case %d: %v, want InvalidArgument", i, err)
			}
		})
	}
}

// WithOverrides: reject answers INVALID_ARGUMENT, ignore lets the rules
// decide the descriptor.
func TestWithOverrides(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
		withLimit(1000, typev3.RateLimitUnit_HOUR, nil, "client", "acme"),
	}}
	rej := New(rules.NewEngine(set, nil), nil, WithOverrides(rules.OverridesReject))
	if _, err := rej.ShouldRateLimit(ctx(t), req); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("reject: err = %v, want INVALID_ARGUMENT", err)
	}
	ign := New(rules.NewEngine(set, nil), nil, WithOverrides(rules.OverridesIgnore))
	resp, err := ign.ShouldRateLimit(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Statuses[0].CurrentLimit.GetName(); got != "per-client" {
		t.Fatalf("ignore: the descriptor was decided by %q, want the rule per-client", got)
	}
}
