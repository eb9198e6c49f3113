package bench

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
)

// BenchmarkBoundedLogKeys decides with the default algorithm as users run
// it, bounded-log at L = 600 per hour, e = 0.05 (m = 30), through
// floodgate.New, visiting keys in scattered order: light, 200,000 keys that
// each hold one entry (fewer than m units); heavy, 20,000 keys filled with
// 540 units first (18 entries of 30), so that every decision reads a state
// of about 20 words. One op is one decision; rejections count too (a
// heavy key that reaches 600 is rejected, which is a decision like any
// other).
func BenchmarkBoundedLogKeys(b *testing.B) {
	for _, c := range []struct {
		name       string
		keys, fill int
	}{{"light", numKeys, 1}, {"heavy", numKeys / 10, 540}} {
		b.Run(c.name, func(b *testing.B) {
			ks := keysFor(numKeys)
			lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Hour, Tolerance: 0.05})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			keys := ks.keys[:c.keys]
			for range c.fill {
				for _, k := range keys {
					if _, err := lim.Allow(ctx, k); err != nil {
						b.Fatal(err)
					}
				}
			}
			// Visit only keys of this case, in the scattered order.
			visit := make([]string, 0, c.keys)
			in := make(map[string]bool, c.keys)
			for _, k := range keys {
				in[k] = true
			}
			for _, k := range ks.visit {
				if in[k] {
					visit = append(visit, k)
				}
			}
			b.ReportAllocs()
			cpu0 := cpuTime()
			i := 0
			for b.Loop() {
				if _, err := lim.Allow(ctx, visit[i]); err != nil {
					b.Fatal(err)
				}
				if i++; i == len(visit) {
					i = 0
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
