package bench

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkFloorPieces measures the two pieces of a decision no table
// layout removes, with CPU time beside wall time (cpu-ns/op, as in
// BenchmarkDecide) so that the figures hold on a shared machine.
//
// clock is the monotonic clock read every experiment makes (time.Since).
// latency/N is BenchmarkMemoryLatency (floor_test.go) at the sizes the
// experiments' tables take at 200,000 keys: 2 MB (8-byte slots in
// buckets), 4 MB (16-byte slots 76% full), 8 MB (16-byte slots 38% full,
// the one-slot experiment after its last doubling) and 16 MB (64-byte
// slots); each step is one dependent read of a random cache line.
func BenchmarkFloorPieces(b *testing.B) {
	b.Run("clock", func(b *testing.B) {
		start := time.Now()
		var d time.Duration
		cpu0 := cpuTime()
		for range b.N {
			d += time.Since(start)
		}
		b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		sinkWord = uint64(d)
	})
	for _, size := range []int{2 << 20, 4 << 20, 8 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("latency/%dMB", size>>20), func(b *testing.B) {
			const line = 8 // uint64s per 64-byte cache line
			next := make([]uint64, size/8)
			n := len(next) / line
			perm := rand.New(rand.NewPCG(3, 4)).Perm(n)
			for i := range n {
				next[perm[i]*line] = uint64(perm[(i+1)%n] * line)
			}
			p := uint64(0)
			b.ResetTimer()
			cpu0 := cpuTime()
			for range b.N {
				p = next[p]
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			sinkWord = p
		})
	}
}
