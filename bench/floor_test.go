package bench

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkMemoryLatency follows a chain of pointers through an array of
// the given size, one cache line per step, in a random cyclic order: each
// step is one dependent memory access, so ns/op is this machine's latency
// for a random read from a working set of that size. The decision
// benchmarks' 200,000 keys occupy 7 MB (Floodgate's fixed-window) to 40 MB
// (ulule) of such memory.
func BenchmarkMemoryLatency(b *testing.B) {
	for _, size := range []int{32 << 10, 2 << 20, 8 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) {
			const line = 8 // uint64s per 64-byte cache line
			next := make([]uint64, size/8)
			n := len(next) / line
			perm := rand.New(rand.NewPCG(1, 2)).Perm(n)
			for i := range n {
				next[perm[i]*line] = uint64(perm[(i+1)%n] * line)
			}
			p := uint64(0)
			b.ResetTimer()
			for range b.N {
				p = next[p]
			}
			sinkWord = p
		})
	}
}

// BenchmarkClockRead is the clock read every decision makes: a monotonic
// reading, as floodgate.Limiter's default clock takes it (time.Since a
// time.Now value), and time.Now, which the peers use.
func BenchmarkClockRead(b *testing.B) {
	start := time.Now()
	b.Run("monotonic", func(b *testing.B) {
		var d time.Duration
		for range b.N {
			d += time.Since(start)
		}
		sinkWord = uint64(d)
	})
	b.Run("time.Now", func(b *testing.B) {
		var t int64
		for range b.N {
			t += time.Now().UnixNano()
		}
		sinkWord = uint64(t)
	})
}

var sinkWord uint64
