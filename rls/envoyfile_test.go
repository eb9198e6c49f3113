package rls

import (
	"math"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// envoyFile is an envoyproxy/ratelimit rule file using the fields its
// README documents.
const envoyFile = `
domain: edge
descriptors:
  - key: generic
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: named
    rate_limit: {name: per-named, unit: minute, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: path
    value: /api/*/action
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: glob
    value: foo*bar*baz
    detailed_metric: true
    value_to_metric: true
    metadata: {team: {name: edge}}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shared
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: own
    value: files/*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: empty
    descriptors:
`

func callEnvoyFile(t *testing.T, c rlsv3.RateLimitServiceClient, descs ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(ctx(t), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: descs})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestEnvoyFileAnswers holds the answers to an envoyproxy/ratelimit file in
// Floodgate's own semantics to what that service answers: names, unlimited
// remaining, duplicates, wildcards anywhere, share_threshold, quota_mode,
// and no headers unless asked for.
func TestEnvoyFileAnswers(t *testing.T) {
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	t.Run("names", func(t *testing.T) {
		c := dialRules(t, envoyFile)
		r := callEnvoyFile(t, c, desc("generic", "x"), desc("named", "y"))
		if n := r.Statuses[0].CurrentLimit; n == nil || n.Name != "" {
			t.Errorf("a rate_limit without a name answered current_limit %v, want an empty name", n)
		}
		if n := r.Statuses[1].CurrentLimit; n == nil || n.Name != "per-named" {
			t.Errorf("a named rate_limit answered current_limit %v, want name per-named", n)
		}
		if len(r.ResponseHeadersToAdd) != 0 {
			t.Errorf("headers without WithHeaders: %v", r.ResponseHeadersToAdd)
		}
	})
	t.Run("unlimited", func(t *testing.T) {
		c := dialRules(t, envoyFile)
		s := callEnvoyFile(t, c, desc("free", "x")).Statuses[0]
		if s.Code != ok || s.LimitRemaining != math.MaxUint32 || s.CurrentLimit != nil {
			t.Errorf("unlimited status %v, want OK, limit_remaining 4294967295 and no current_limit", s)
		}
	})
	t.Run("duplicate", func(t *testing.T) {
		c := dialRules(t, envoyFile)
		r := callEnvoyFile(t, c, desc("generic", "d"), desc("generic", "d"))
		for i, s := range r.Statuses {
			if s.CurrentLimit.GetRequestsPerUnit() != 2 || s.LimitRemaining != 1 {
				t.Errorf("status %d of a repeated descriptor %v, want its limit and 1 remaining (counted once)", i, s)
			}
		}
	})
	t.Run("wildcards", func(t *testing.T) {
		c := dialRules(t, envoyFile)
		for _, tc := range []struct {
			key, value string
			limited    bool
		}{
			{"path", "/api/v1/action", true},
			{"path", "/api//action", true},
			{"path", "/api/v1/other", false},
			{"glob", "fooXbarYbaz", true},
			{"glob", "foobarbaz", true},
			{"glob", "foobazbar", false},
		} {
			first := callEnvoyFile(t, c, desc(tc.key, tc.value)).Statuses[0]
			second := callEnvoyFile(t, c, desc(tc.key, tc.value)).Statuses[0]
			if got := first.CurrentLimit != nil && second.Code == over; got != tc.limited {
				t.Errorf("%s=%q: limited %v, want %v (statuses %v, %v)", tc.key, tc.value, got, tc.limited, first, second)
			}
		}
	})
	t.Run("share_threshold", func(t *testing.T) {
		c := dialRules(t, envoyFile)
		got := []rlsv3.RateLimitResponse_Code{
			callEnvoyFile(t, c, desc("shared", "files/a")).OverallCode,
			callEnvoyFile(t, c, desc("shared", "files/b")).OverallCode,
			callEnvoyFile(t, c, desc("shared", "files/c")).OverallCode,
			callEnvoyFile(t, c, desc("own", "files/a")).OverallCode,
			callEnvoyFile(t, c, desc("own", "files/b")).OverallCode,
		}
		want := []rlsv3.RateLimitResponse_Code{ok, ok, over, ok, ok}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("codes %v, want %v: shared values count together, others apart", got, want)
			}
		}
	})
	t.Run("quota_mode", func(t *testing.T) {
		c := dialRules(t, envoyFile)
		r := callEnvoyFile(t, c, desc("quota_a", "q"), desc("quota_b", "q"))
		if r.OverallCode != ok {
			t.Fatalf("first call %v", r)
		}
		r = callEnvoyFile(t, c, desc("quota_a", "q"), desc("quota_b", "q"))
		if r.OverallCode != ok || r.Statuses[0].Code != over || r.Statuses[1].Code != ok {
			t.Fatalf("one quota over, one not: %v; want OK overall with the first status OVER_LIMIT", r)
		}
		r = callEnvoyFile(t, c, desc("quota_a", "q"))
		if r.OverallCode != over {
			t.Fatalf("every quota over: %v; want OVER_LIMIT", r)
		}
	})
	t.Run("headers on", func(t *testing.T) {
		c, _ := dial(t, WithHeaders())
		r := callEnvoyFile(t, c, desc("client", "acme"))
		if len(r.ResponseHeadersToAdd) == 0 {
			t.Errorf("WithHeaders: no headers in %v", r)
		}
	})
}
