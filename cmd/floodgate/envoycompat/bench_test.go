package envoycompat

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// BenchmarkShouldRateLimit decides requests as scripts/compare-envoy-ratelimit
// sends them (domain load, one descriptor client=<one of 10,000 values>,
// 1000 a second each, so every call is one Redis round trip), in parallel,
// on the suite's redis-server.
func BenchmarkShouldRateLimit(b *testing.B) {
	s, _ := newService(b, "domain: load\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: 1000}\n", 0, func(s *Settings) {
		s.Stats.UseStatsd = false
	})
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			i := n.Add(1)
			req := &rlsv3.RateLimitRequest{Domain: "load", Descriptors: []*commonv3.RateLimitDescriptor{
				{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: "c-" + strconv.FormatInt(i%10000, 10)}}}}}
			if _, err := s.ShouldRateLimit(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
