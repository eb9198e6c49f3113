package rls

import (
	"context"
	"strconv"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

// envoyResponseHeaders replays what Envoy's rate limit filter does with an
// answer when enable_x_ratelimit_headers is DRAFT_VERSION_03 (as
// deploy/envoy/envoy.yaml sets it): it makes X-RateLimit-Limit,
// -Remaining and -Reset from the status with the least remaining
// allowance, then appends every header of response_headers_to_add. It
// returns the header lines the client gets, as name: value.
func envoyResponseHeaders(resp *rlsv3.RateLimitResponse) []string {
	var out []string
	var tightest *rlsv3.RateLimitResponse_DescriptorStatus
	for _, st := range resp.GetStatuses() {
		if st.GetCurrentLimit() != nil && (tightest == nil || st.GetLimitRemaining() < tightest.GetLimitRemaining()) {
			tightest = st
		}
	}
	if tightest != nil {
		out = append(out,
			"x-ratelimit-limit: "+strconv.FormatUint(uint64(tightest.GetCurrentLimit().GetRequestsPerUnit()), 10),
			"x-ratelimit-remaining: "+strconv.FormatUint(uint64(tightest.GetLimitRemaining()), 10),
			"x-ratelimit-reset: "+strconv.FormatInt(tightest.GetDurationUntilReset().GetSeconds(), 10))
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		out = append(out, strings.ToLower(h.GetKey())+": "+h.GetValue())
	}
	return out
}

// TestEnvoyGetsEachRateLimitHeaderOnce: behind Envoy with its own
// X-RateLimit headers on, a client gets each header once with the default
// service, and twice (two values, perhaps different) if the service also
// sends them (rls.headers): the reason they are off by default.
func TestEnvoyGetsEachRateLimitHeaderOnce(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("path", "/loan/1")}}
	for _, c := range []struct {
		name string
		opts []Option
		want int
	}{
		{"default", nil, 1},
		{"rls.headers on", []Option{WithHeaders()}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := New(rules.NewEngine(set, memstore.New(memstore.Options{})), nil, c.opts...)
			resp, err := s.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			got := envoyResponseHeaders(resp)
			for _, name := range []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} {
				n := 0
				for _, line := range got {
					if strings.HasPrefix(line, name+": ") {
						n++
					}
				}
				if n != c.want {
					t.Errorf("%s appears %d times, want %d: %q", name, n, c.want, got)
				}
			}
		})
	}
}
