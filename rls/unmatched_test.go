package rls

import (
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/rules"
)

// A request no rule applies to gets the answer Envoy expects (every
// descriptor OK, no current_limit) and the unmatched response header.
func TestUnmatchedHeader(t *testing.T) {
	c, _ := dial(t)
	weighted := desc("client", "w")
	weighted.HitsAddend = wrapperspb.UInt64(2)
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"unknown domain", &rlsv3.RateLimitRequest{Domain: "default", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "a")}}, rules.UnmatchedDomain},
		{"no rule", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("nothing", "a")}}, rules.UnmatchedRules},
		{"mixed weights, unknown domain", &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: []*commonv3.RateLimitDescriptor{weighted, desc("client", "b")}}, rules.UnmatchedDomain},
		{"matched", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "m")}}, ""},
		{"mixed weights, one matched", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{weighted, desc("nothing", "b")}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var md metadata.MD
			resp, err := c.ShouldRateLimit(ctx(t), tc.req, grpc.Header(&md))
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			got := ""
			if v := md.Get(UnmatchedHeader); len(v) > 0 {
				got = v[0]
			}
			if got != tc.want || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Errorf("%s: header %q code %v, want %q OK", tc.name, got, resp.OverallCode, tc.want)
			}
			if tc.want != "" {
				for i, st := range resp.Statuses {
					if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit != nil || len(resp.ResponseHeadersToAdd) != 0 {
						t.Errorf("%s: status %d %v", tc.name, i, st)
					}
				}
			}
		})
	}
}
