package rls

import (
	"context"
	"strconv"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

// BenchmarkShouldRateLimit measures the service's own cost per call (no
// network): request conversion, the engine's Check on a memory store, and
// building the response with its headers. 1,000 keys, one descriptor.
func BenchmarkShouldRateLimit(b *testing.B) {
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		b.Fatal(err)
	}
	s := New(rules.NewEngine(set, memstore.New(memstore.Options{})), nil)
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("path", "/loan/"+strconv.Itoa(i))}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}
