package memtable

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/store"
)

// BenchmarkDecideOne measures the store alone (no Limiter, no clock read)
// deciding on known keys visited in a scattered order, at a hot-set size
// that stays in cache and at the baseline's 200,000 keys. The find sub-benchmark
// is the table lookup alone: hash, probe, state read.
func BenchmarkDecideOne(b *testing.B) {
	for _, n := range []int{1_000, 200_000} {
		s := New(Options{})
		c := newCounter(1<<40, 1000*time.Hour, 2)
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "client-" + strconv.Itoa(i)
			if _, err := s.DecideOne(ctx, sec, store.Request{Algorithm: c, Key: keys[i], Cost: 1}); err != nil {
				b.Fatal(err)
			}
		}
		// Copies of the keys, laid out in visit order as an incoming
		// request's key would be: in cache, unlike the table.
		var all strings.Builder
		perm := rand.New(rand.NewPCG(1, 2)).Perm(n)
		for _, p := range perm {
			all.WriteString(keys[p])
		}
		arena := all.String()
		visit := make([]string, n)
		off := 0
		for i, p := range perm {
			visit[i] = arena[off : off+len(keys[p])]
			off += len(keys[p])
		}
		b.Run(strconv.Itoa(n)+"-keys", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for range b.N {
				if _, err := s.DecideOne(ctx, sec, store.Request{Algorithm: c, Key: visit[i], Cost: 1}); err != nil {
					b.Fatal(err)
				}
				if i++; i == n {
					i = 0
				}
			}
		})
		b.Run(strconv.Itoa(n)+"-keys/find", func(b *testing.B) {
			l, _ := s.limitFor(c)
			i, found := 0, 0
			for range b.N {
				h := s.hash(visit[i])
				t := s.shardOf(h).table(l)
				if sl := t.find(h); sl >= 0 {
					found++
				}
				if i++; i == n {
					i = 0
				}
			}
			if found == 0 {
				b.Fatal("no key found")
			}
		})
	}
}
