// Package bench compares Floodgate's in-memory decisions with other Go rate
// limiters. It is a module of its own so that the peers it imports stay out
// of Floodgate's go.mod.
//
// Every benchmark decides one request on a key that already exists, with
// 200,000 keys (the baseline's tracked-client count) visited in a scattered
// order: a random permutation, fixed by seed, with each parallel goroutine
// starting at its own offset. Visiting keys in the order they were inserted
// would keep the limiter's working set in cache and flatter every
// implementation. The key strings themselves are read in sequence (see
// visit): the cost measured is the limiter's, not that of fetching the
// benchmark's own key table. Limits are set so high
// that every request is allowed: the benchmark measures the bookkeeping, not
// the rejection path.
//
// Run:
//
//	cd bench && go test -run XXX -bench . -cpu 1,2 -benchtime 2s -count 3
//
// Each benchmark also reports B/key, the live heap after 200,000 keys minus
// before, per key, and cpu-ns/op, the CPU time the whole process spent
// (user and system, all threads, garbage collection included) per
// operation. On a machine shared with other work, ns/op (wall time) grows
// with the load while cpu-ns/op mostly does not.
package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	golimiter "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// numKeys is the number of distinct keys each limiter tracks in
// BenchmarkDecide; hotKeys is the number in BenchmarkDecideHot.
const (
	numKeys = 200_000
	hotKeys = 1_000
)

// huge is a limit no benchmark reaches.
const huge = 1 << 40

// A keySet is the keys of one benchmark size.
type keySet struct {
	// keys are the keys as first seen, each its own allocation; setup
	// inserts them in this order.
	keys []string
	// visit holds the same keys in the scattered order the benchmark
	// visits them: visit[i] = keys[perm[i]] for a random permutation perm.
	// They are fresh copies whose bytes lie one after another in visit
	// order, like the key of an incoming request, which a server has just
	// built and which is in cache: only the limiter's own memory is visited
	// in scattered order, and a limiter that keeps keys must compare bytes
	// with a different copy, as it would in production.
	visit []string
}

var (
	keySetsMu sync.Mutex
	keySets   = map[int]*keySet{}
)

func keysFor(n int) *keySet {
	keySetsMu.Lock()
	defer keySetsMu.Unlock()
	if ks, ok := keySets[n]; ok {
		return ks
	}
	ks := &keySet{keys: make([]string, n), visit: make([]string, n)}
	for i := range ks.keys {
		ks.keys[i] = "client-" + strconv.Itoa(i)
	}
	perm := rand.New(rand.NewPCG(1, 2)).Perm(n)
	var all strings.Builder
	for _, p := range perm {
		all.WriteString(ks.keys[p])
	}
	arena := all.String()
	off := 0
	for i, p := range perm {
		ks.visit[i] = arena[off : off+len(ks.keys[p])]
		off += len(ks.keys[p])
	}
	keySets[n] = ks
	return ks
}

// A limiter is one implementation under test: allow decides one request on
// key and reports whether it was allowed.
type limiter interface {
	allow(ctx context.Context, key string) bool
}

type floodgateLimiter struct{ l *floodgate.Limiter }

func (f floodgateLimiter) allow(ctx context.Context, key string) bool {
	d, err := f.l.Allow(ctx, key)
	return err == nil && d.Allowed
}

func newFloodgate(alg algorithm.Name) func() limiter { return newFloodgateAt(alg, algorithm.MaxLimit) }

// newFloodgateAt is newFloodgate with limit requests per hour.
func newFloodgateAt(alg algorithm.Name, limit int64) func() limiter {
	return func() limiter {
		cfg := floodgate.Limit{Algorithm: alg, Limit: limit, Window: time.Hour}
		if alg == algorithm.GCRA {
			cfg.Burst = algorithm.MaxLimit // else the key is idle after one emission interval
		}
		l, err := floodgate.New(cfg)
		if err != nil {
			panic(err)
		}
		return floodgateLimiter{l}
	}
}

// xrateMutex is golang.org/x/time/rate with one *rate.Limiter per key in a
// map under a mutex.
type xrateMutex struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func (x *xrateMutex) allow(_ context.Context, key string) bool {
	x.mu.Lock()
	l, ok := x.m[key]
	if !ok {
		l = rate.NewLimiter(rate.Limit(huge), huge)
		x.m[key] = l
	}
	x.mu.Unlock()
	return l.Allow()
}

// xrateSyncMap is golang.org/x/time/rate with the per-key limiters in a
// sync.Map.
type xrateSyncMap struct{ m sync.Map }

func (x *xrateSyncMap) allow(_ context.Context, key string) bool {
	v, ok := x.m.Load(key)
	if !ok {
		v, _ = x.m.LoadOrStore(key, rate.NewLimiter(rate.Limit(huge), huge))
	}
	return v.(*rate.Limiter).Allow()
}

type sethvargo struct{ s golimiter.Store }

func (s sethvargo) allow(ctx context.Context, key string) bool {
	_, _, _, ok, err := s.s.Take(ctx, key)
	return err == nil && ok
}

// close stops the store's sweeper goroutine, which otherwise keeps the
// store and its keys alive after the benchmark.
func (s sethvargo) close() { _ = s.s.Close(context.Background()) }

func newSethvargo() limiter {
	s, err := memorystore.New(&memorystore.Config{Tokens: huge, Interval: time.Hour})
	if err != nil {
		panic(err)
	}
	return sethvargo{s}
}

type throttledGCRA struct{ l *throttled.GCRARateLimiterCtx }

func (t throttledGCRA) allow(ctx context.Context, key string) bool {
	limited, _, err := t.l.RateLimitCtx(ctx, key, 1)
	return err == nil && !limited
}

func newThrottled() limiter {
	// maxKeys 0: a plain map under a mutex, the store's fastest form (a
	// positive bound switches it to an LRU list).
	st, err := throttledmem.NewCtx(0)
	if err != nil {
		panic(err)
	}
	l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(1_000_000), MaxBurst: 1 << 30})
	if err != nil {
		panic(err)
	}
	return throttledGCRA{l}
}

type ululeLimiter struct{ l *ulule.Limiter }

func (u ululeLimiter) allow(ctx context.Context, key string) bool {
	c, err := u.l.Get(ctx, key)
	return err == nil && !c.Reached
}

func newUlule() limiter {
	return ululeLimiter{ulule.New(ululemem.NewStore(), ulule.Rate{Period: time.Hour, Limit: huge})}
}

// implementations lists every limiter benchmarked, Floodgate's first.
var implementations = []struct {
	name string
	make func() limiter
}{
	{"floodgate/fixed-window", newFloodgate(algorithm.FixedWindow)},
	{"floodgate/token-bucket", newFloodgate(algorithm.TokenBucket)},
	{"floodgate/gcra", newFloodgate(algorithm.GCRA)},
	{"floodgate/bounded-log", newFloodgate(algorithm.BoundedLog)},
	{"floodgate/sliding-window", newFloodgate(algorithm.SlidingWindow)},
	// The same at a limit below 65,536, where the slice counts are 16 bits
	// (four to a word) instead of 32: most real limits, and a smaller slot.
	{"floodgate/sliding-window-16bit", newFloodgateAt(algorithm.SlidingWindow, 60_000)},
	{"floodgate/weighted-window", newFloodgate(algorithm.WeightedWindow)},
	{"x-time-rate/mutex-map", func() limiter { return &xrateMutex{m: make(map[string]*rate.Limiter)} }},
	{"x-time-rate/sync-map", func() limiter { return &xrateSyncMap{} }},
	{"sethvargo-go-limiter/memorystore", newSethvargo},
	{"throttled-v2/gcra-memstore", newThrottled},
	{"ulule-limiter-v3/memory", newUlule},
}

// built keeps the limiter of the benchmark that is running, so the calls Go
// makes with growing b.N do not rebuild the keys each time, and only one
// implementation's keys are live at once (a peer that allocates pays for
// garbage collection in proportion to the live heap).
var built struct {
	name     string
	lim      limiter
	heapPerK float64
}

func prepare(b *testing.B, name string, ks *keySet, mk func() limiter) (limiter, float64) {
	if built.name == name {
		return built.lim, built.heapPerK
	}
	if c, ok := built.lim.(interface{ close() }); ok {
		c.close()
	}
	built.lim, built.name = nil, ""
	ctx := context.Background()
	var before, after runtime.MemStats
	// Twice: a peer's store freed by a finalizer (ulule's janitor) goes
	// only in the second collection.
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	lim := mk()
	for _, k := range ks.keys {
		if !lim.allow(ctx, k) {
			b.Fatalf("%s: first request on %s rejected", name, k)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	built.name, built.lim = name, lim
	built.heapPerK = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(len(ks.keys))
	return lim, built.heapPerK
}

// cpuTime returns the CPU time the process has used so far, in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkDecide decides one request on an existing key per operation, with
// 200,000 keys visited in scattered order.
func BenchmarkDecide(b *testing.B) { benchDecide(b, numKeys) }

// BenchmarkDecideHot is BenchmarkDecide with 1,000 keys, which stay in
// cache: it measures the work of a decision rather than memory latency.
func BenchmarkDecideHot(b *testing.B) { benchDecide(b, hotKeys) }

func benchDecide(b *testing.B, n int) {
	ks := keysFor(n)
	for _, impl := range implementations {
		b.Run(impl.name, func(b *testing.B) {
			lim, perKey := prepare(b, fmt.Sprint(impl.name, n), ks, impl.make)
			var next atomic.Uint64
			var rejected atomic.Int64
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				// Each goroutine walks the permutation from its own
				// offset, so goroutines do not warm each other's path.
				i := int(next.Add(1)*7919*131) % n
				for pb.Next() {
					if !lim.allow(ctx, ks.visit[i]) {
						rejected.Add(1)
					}
					if i++; i == n {
						i = 0
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(perKey, "B/key")
			if k := rejected.Load(); k > 0 {
				b.Fatalf("%d requests rejected; the limits are meant never to be reached", k)
			}
		})
	}
}

// TestImplementationsAllow is a quick check, run by go test without -bench,
// that every implementation is wired up and allows a first request.
func TestImplementationsAllow(t *testing.T) {
	ctx := context.Background()
	for _, impl := range implementations {
		lim := impl.make()
		for i := range 3 {
			if !lim.allow(ctx, fmt.Sprint("k", i)) {
				t.Errorf("%s: first request rejected", impl.name)
			}
		}
	}
}

// BenchmarkBytesPerKey reports the live heap per key of the default
// algorithm, bounded-log (L = 600, e = 0.05, through floodgate.New), for
// a light key (one request) and a heavy one (every key at its limit:
// 600 requests within the window), as B/key. The heavy case uses 20,000
// keys to keep the run short.
func BenchmarkBytesPerKey(b *testing.B) {
	for _, c := range []struct {
		name         string
		keys, perKey int
	}{{"bounded-log/light", numKeys, 1}, {"bounded-log/heavy", numKeys / 10, 600}} {
		b.Run(c.name, func(b *testing.B) {
			keys := keysFor(numKeys).keys[:c.keys]
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Hour, Tolerance: 0.05})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			n := 0
			b.ResetTimer()
			for range c.perKey {
				for _, k := range keys {
					if d, err := lim.Allow(ctx, k); err != nil || !d.Allowed {
						b.Fatalf("%s: request on %s rejected below its limit", c.name, k)
					}
					n++
				}
			}
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(lim)
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(c.keys), "B/key")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/request")
		})
	}
}
