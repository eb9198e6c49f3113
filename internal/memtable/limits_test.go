package memtable

import (
	"runtime"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// TestDistinctLimitsBounded sends a flood of requests that each name a new
// limit (as distinct override values do), one key each, all within one
// window, against a store bounded in bytes. The registry must stay within
// its bound, registering must not slow down as the flood grows, and
// victims at their limit must stay limited: one whose limit is used
// during the flood, and one whose limit sits idle (so it is retired with
// its keys and its use goes to the orphan summary).
func TestDistinctLimitsBounded(t *testing.T) {
	flood := 100_000
	if raceEnabled || testing.Short() {
		flood = 20_000
	}
	const maxBytes = 64 << 20
	s := New(Options{Shards: 16, MaxBytes: maxBytes})
	newAlg := func(c algorithm.Config) algorithm.Algorithm {
		a, err := algorithm.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	busy := newAlg(algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Minute})
	idle := newAlg(algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 7, Window: time.Minute})
	now := int64(time.Hour)
	use := func(a algorithm.Algorithm, key string) algorithm.Decision {
		d, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: key, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for range 5 {
		use(busy, "victim")
	}
	for range 7 {
		use(idle, "victim")
	}
	start := time.Now()
	var firstHalf time.Duration
	for i := range flood {
		a := newAlg(algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: int64(10 + i%3000), Window: time.Minute + time.Duration(i/3000)*time.Millisecond})
		if d := use(a, "attacker"); !d.Allowed {
			t.Fatalf("flood limit %d: first request rejected", i)
		}
		if i%1000 == 0 {
			if d := use(busy, "victim"); d.Allowed {
				t.Fatalf("after %d flood limits the busy victim was allowed past its 5", i)
			}
		}
		if i == flood/2 {
			firstHalf = time.Since(start)
		}
		now += int64(time.Microsecond)
	}
	secondHalf := time.Since(start) - firstHalf
	s.limitsMu.Lock()
	live, retired, maxLimits := len(s.limits), s.retiredLimits, s.maxLimits
	s.limitsMu.Unlock()
	st := s.Stats()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	t.Logf("%d distinct limits in %v (first half %v, second %v); live %d (bound %d), retired %d; store bytes %d of %d; heap %d MiB",
		flood, firstHalf+secondHalf, firstHalf, secondHalf, live, maxLimits, retired, st.Bytes, maxBytes, ms.HeapAlloc>>20)
	if live > maxLimits {
		t.Fatalf("%d live limits, more than the bound %d", live, maxLimits)
	}
	if st.Bytes > maxBytes {
		t.Fatalf("store accounts %d bytes, more than its bound %d", st.Bytes, maxBytes)
	}
	if !raceEnabled && secondHalf > 4*firstHalf+time.Second {
		t.Fatalf("registering slowed down as limits accumulated: first half %v, second %v", firstHalf, secondHalf)
	}
	if d := use(busy, "victim"); d.Allowed {
		t.Fatal("busy victim allowed past its limit after the flood")
	}
	if d := use(idle, "victim"); d.Allowed {
		t.Fatal("idle victim, whose limit was retired with its keys, allowed past its limit after the flood")
	}
	now += int64(3 * time.Minute)
	if d := use(busy, "victim"); !d.Allowed {
		t.Fatal("busy victim rejected once its window had passed")
	}
	if d := use(idle, "victim"); !d.Allowed {
		t.Fatal("idle victim rejected once its window had passed (and its charge had expired)")
	}
}

// TestLimitBytesCoverMeasuredHeap checks that Store.limitBytes, what a limit is
// accounted against the store's bytes, covers what registering a limit
// with one key costs on the heap: its registry entry, its table in a shard
// and its share of the shards' table indexes.
func TestLimitBytesCoverMeasuredHeap(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory distorts heap figures")
	}
	const n = 4096
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := New(Options{})
	for i := range n {
		// The store keeps each limit's algorithm (a bounded log, the
		// algorithm of an override that names none) alive.
		a, err := algorithm.New(algorithm.Config{Limit: int64(10 + i), Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.DecideOne(ctx, sec, store.Request{Algorithm: a, Key: "k" + string(rune('a'+i%26)), Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	runtime.KeepAlive(s)
	t.Logf("%d limits with a key each, %d shards: %d heap bytes per limit (accounted %d)", n, len(s.shards), per, s.limitBytes)
	if per > s.limitBytes {
		t.Fatalf("a limit costs %d heap bytes, more than the %d it is accounted", per, s.limitBytes)
	}
}

// TestRetireWhileDeciding floods a small registry with distinct limits from
// several goroutines, so that limits are retired while others decide on
// them (single and batch decisions), and checks that a shared limit never
// allows more than its limit.
func TestRetireWhileDeciding(t *testing.T) {
	s := New(Options{Shards: 4, MaxBytes: 1 << 20}) // the least registry: 256 limits
	shared, err := algorithm.New(algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 4, 1500
	allowed := make([]int, workers)
	done := make(chan int)
	for w := range workers {
		go func() {
			defer func() { done <- w }()
			out := make([]algorithm.Decision, 2)
			for i := range rounds {
				a, err := algorithm.New(algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: int64(1000 + w*rounds + i), Window: time.Hour})
				if err != nil {
					t.Error(err)
					return
				}
				reqs := []store.Request{{Algorithm: a, Key: "x", Cost: 1}, {Algorithm: shared, Key: "v", Cost: 1}}
				if i%2 == 0 {
					if err := s.Decide(ctx, sec, reqs, out); err != nil {
						t.Error(err)
						return
					}
				} else {
					d1, _ := s.DecideOne(ctx, sec, reqs[0])
					d2, _ := s.DecideOne(ctx, sec, reqs[1])
					out[0], out[1] = d1, d2
				}
				if out[1].Allowed {
					allowed[w]++
				}
			}
		}()
	}
	for range workers {
		<-done
	}
	total := 0
	for _, n := range allowed {
		total += n
	}
	s.limitsMu.Lock()
	live, retired := len(s.limits), s.retiredLimits
	s.limitsMu.Unlock()
	t.Logf("shared limit allowed %d of %d; live limits %d, retired %d", total, workers*rounds, live, retired)
	if total > 100 {
		t.Fatalf("shared limit of 100 allowed %d while limits were retired", total)
	}
	if retired == 0 {
		t.Fatal("no limit was retired: the test did not exercise retirement")
	}
}
