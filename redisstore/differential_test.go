package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

// t0 is a realistic Unix time (late 2025) in nanoseconds, on a millisecond.
const t0 = int64(1_764_470_000_000) * int64(time.Millisecond)

// diffConfigs are limits whose time parameters are whole microseconds, so
// the scripts (µs) and the Go algorithms (ns) must agree exactly on
// millisecond traces.
var diffConfigs = []algorithm.Config{
	{Algorithm: algorithm.FixedWindow, Limit: 10, Window: time.Second},
	{Algorithm: algorithm.SlidingWindow, Limit: 20, Window: 1200 * time.Millisecond, Slices: 12},
	{Algorithm: algorithm.SlidingWindow, Limit: 7, Window: 900 * time.Millisecond, Slices: 3},
	{Algorithm: algorithm.WeightedWindow, Limit: 15, Window: time.Second},
	{Algorithm: algorithm.SlidingLog, Limit: 8, Window: 500 * time.Millisecond},
	{Algorithm: algorithm.TokenBucket, Limit: 10, Window: time.Second, Capacity: 5},
	{Algorithm: algorithm.TokenBucket, Limit: 10, Window: time.Second, Capacity: 3, Rate: 4},
	{Algorithm: algorithm.GCRA, Limit: 10, Window: time.Second, Burst: 3},
	{Algorithm: algorithm.LeakyBucket, Limit: 5, Window: time.Second, MaxDelay: 600 * time.Millisecond},
	{Algorithm: algorithm.Concurrency, Limit: 3, Window: 2 * time.Second},
	{Algorithm: algorithm.Concurrency, Limit: 4},
	{Algorithm: algorithm.BoundedLog, Limit: 20, Window: time.Second, Tolerance: 0.1},
	{Algorithm: algorithm.BoundedLog, Limit: 5, Window: 700 * time.Millisecond, Tolerance: 0.01},
	// The baseline's limit (600 per 60 s) for the algorithms it compares.
	{Algorithm: algorithm.FixedWindow, Limit: 600, Window: time.Minute},
	{Algorithm: algorithm.SlidingWindow, Limit: 600, Window: time.Minute, Slices: 12},
	{Algorithm: algorithm.WeightedWindow, Limit: 600, Window: time.Minute},
	{Algorithm: algorithm.TokenBucket, Limit: 600, Window: time.Minute, Capacity: 60},
	{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute},
	{Algorithm: algorithm.SlidingLog, Limit: 600, Window: time.Minute},
}

// goRef keeps a local Go state per key: the reference the store must match.
type goRef struct {
	alg    algorithm.Algorithm
	states map[string][]int64
}

func (g *goRef) state(key string) []int64 {
	s, ok := g.states[key]
	if !ok {
		s = make([]int64, g.alg.Words())
		g.states[key] = s
	}
	return s
}

func name(c algorithm.Config) string {
	return fmt.Sprintf("%s-%d-%v-%d-%d-%v", c.Algorithm, c.Limit, c.Window, c.Capacity, c.Burst, c.Tolerance)
}

// TestDifferentialRandom replays random millisecond traces (costs from 0 to
// above the limit, clocks that step back, releases, and merged events)
// through the Go algorithm on a local state and through Redis, and requires
// every decision and every merged state to be identical.
func TestDifferentialRandom(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	for ci, c := range diffConfigs {
		t.Run(name(c), func(t *testing.T) {
			a := mustAlg(t, c)
			ref := &goRef{alg: a, states: map[string][]int64{}}
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			keys := []string{"a", "b", "c"}
			now := t0
			limit := a.Config().Limit
			steps := 300
			if limit >= 600 {
				steps = 1500
			}
			sp, err := s.specFor(a)
			if err != nil {
				t.Fatal(err)
			}
			var leases []lease.ID     // concurrency leases acquired
			forms := map[string]int{} // bounded-log's stored forms after each step
			defer func() {
				if c.Algorithm == algorithm.BoundedLog {
					t.Logf("stored forms after each step: %v", forms)
					if forms["light"]+forms["short"] == 0 || forms["doubles"] == 0 || forms["merged"] == 0 {
						t.Errorf("the trace did not cover the integer forms, doubles and merged doubles: %v", forms)
					}
				}
			}()
			for step := range steps {
				if c.Algorithm == algorithm.BoundedLog && step > 0 {
					forms[storedForm(t, s.key(sp, keys[step%len(keys)]))]++
				}
				switch r := rng.IntN(100); {
				case r < 3: // the clock steps back
					now -= int64(rng.IntN(200)) * int64(time.Millisecond)
				case r < 10: // a pause
					now += int64(rng.IntN(3000)) * int64(time.Millisecond)
				default:
					now += int64(rng.IntN(int(c.Window/time.Millisecond)/max(int(limit)/2, 1)+1)) * int64(time.Millisecond)
				}
				key := keys[rng.IntN(len(keys))]
				cost := int64(1)
				switch r := rng.IntN(100); {
				case r < 2:
					cost = 0
				case r < 4:
					cost = limit + 1
				case r < 20:
					cost = 1 + rng.Int64N(min(limit, 4))
				}
				req := store.Request{Algorithm: a, Key: key, Cost: cost}
				switch op := rng.IntN(100); {
				case op < 10 && c.Algorithm == algorithm.Concurrency:
					a.Release(ref.state(key), now, cost)
					if err := s.Release(ctx, now, []store.Request{req}); err != nil {
						t.Fatal(err)
					}
				case op >= 15 && op < 30 && c.Algorithm == algorithm.Concurrency:
					// Leases: acquire a new one, or release one held, one
					// released already, or one never acquired.
					la := a.(algorithm.Leaser)
					if op < 22 || len(leases) == 0 {
						id := lease.New()
						leases = append(leases, id)
						want := micros(la.Acquire(ref.state(key), now, cost, id))
						out := make([]algorithm.Decision, 1)
						if err := s.Acquire(ctx, now, id, []store.Request{req}, out); err != nil {
							t.Fatal(err)
						}
						if out[0] != want {
							t.Fatalf("step %d: acquire, key %s, cost %d:\nredis %+v\ngo    %+v", step, key, cost, out[0], want)
						}
						break
					}
					id := leases[rng.IntN(len(leases))]
					if op == 29 {
						id = lease.New()
					}
					want := la.ReleaseLease(ref.state(key), now, id)
					got, err := s.ReleaseLease(ctx, now, id, []store.Request{req})
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Fatalf("step %d: release lease %v of key %s: redis %v, go %v", step, id, key, got, want)
					}
				case op < 15 && key != "c":
					// Merge events from elsewhere, some older than now (key
					// c takes none, so its states stay in the forms
					// decisions make).
					var evs []store.Event
					for range rng.IntN(4) {
						at := now - int64(rng.IntN(int(c.Window/time.Millisecond)+1))*int64(time.Millisecond)
						evs = append(evs, store.Event{Time: at, Cost: 1 + rng.Int64N(3)})
					}
					for _, e := range evs {
						a.Record(ref.state(key), e.Time, e.Cost)
					}
					b := []store.SyncBatch{{Algorithm: a, Key: key, Events: evs}}
					if err := s.Sync(ctx, now, b); err != nil {
						t.Fatal(err)
					}
					if !sameState(a, b[0].State, ref.state(key)) {
						t.Fatalf("step %d: state after merging %v:\nredis %v\ngo    %v", step, evs, b[0].State, ref.state(key))
					}
				default:
					want := micros(a.Decide(ref.state(key), now, cost))
					got, err := s.DecideOne(ctx, now, req)
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Fatalf("step %d at +%v, key %s, cost %d:\nredis %+v\ngo    %+v",
							step, time.Duration(now-t0), key, cost, got, want)
					}
				}
			}
			// The final states agree too.
			for _, key := range keys {
				b := []store.SyncBatch{{Algorithm: a, Key: key}}
				if err := s.Sync(ctx, now, b); err != nil {
					t.Fatal(err)
				}
				want := ref.state(key)
				if !sameState(a, b[0].State, want) {
					t.Fatalf("final state of %s:\nredis %v\ngo    %v", key, b[0].State, want)
				}
			}
		})
	}
}

// TestDifferentialSeed replays the baseline's client (one window at 10 and at
// 90 requests per second against 600 per 60 s, request i at i/rate seconds,
// here rounded down to the millisecond) and its boundary burst, and requires
// identical decisions and identical totals.
func TestDifferentialSeed(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	for _, c := range diffConfigs[len(diffConfigs)-6:] {
		for _, rate := range []int64{10, 90} {
			t.Run(fmt.Sprintf("%s/%d", name(c), rate), func(t *testing.T) {
				t.Parallel() // separate keys; rueidis pipelines the calls
				a := mustAlg(t, c)
				st := make([]int64, a.Words())
				key := fmt.Sprintf("baseline-%d", rate)
				accepted := 0
				// Past the end of the first window, into the second.
				n := rate * 70
				for i := range n {
					now := t0 + i*1000/rate*int64(time.Millisecond)
					want := micros(a.Decide(st, now, 1))
					got, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: key, Cost: 1})
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Fatalf("request %d: redis %+v, go %+v", i, got, want)
					}
					if got.Allowed {
						accepted++
					}
				}
				t.Logf("%d of %d accepted", accepted, n)
			})
		}
	}
}

// TestDecideAllOrNothing checks multi-request decisions (shadow limits,
// the same key twice, a rejection that must leave the others uncounted)
// against the memory store, whose semantics store.Store defines.
func TestDecideAllOrNothing(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	mem := memstore.New(memstore.Options{})
	ctx := context.Background()
	algs := []algorithm.Algorithm{
		mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Second}),
		mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 8, Window: time.Second}),
		mustAlg(t, algorithm.Config{Algorithm: algorithm.TokenBucket, Limit: 4, Window: time.Second}),
		mustAlg(t, algorithm.Config{Algorithm: algorithm.SlidingWindow, Limit: 6, Window: time.Second, Slices: 4}),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	now := t0
	for step := range 400 {
		now += int64(rng.IntN(80)) * int64(time.Millisecond)
		n := 1 + rng.IntN(4)
		reqs := make([]store.Request, n)
		for i := range reqs {
			reqs[i] = store.Request{
				Algorithm: algs[rng.IntN(len(algs))],
				Key:       []string{"x", "y"}[rng.IntN(2)],
				Cost:      1 + rng.Int64N(2),
				Shadow:    rng.IntN(5) == 0,
			}
		}
		want := make([]algorithm.Decision, n)
		got := make([]algorithm.Decision, n)
		if err := mem.Decide(ctx, now, reqs, want); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			want[i] = micros(want[i])
		}
		if err := s.Decide(ctx, now, reqs, got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step %d, requests %+v:\nredis %+v\nmem   %+v", step, reqs, got, want)
		}
	}
}

// micros rounds d's durations up to whole microseconds, the resolution of
// the scripts. With inputs in whole microseconds the two differ only where
// Go works below a microsecond (the concurrency guard's "+1 ns", the
// weighted window's floor(r*W/p) in ns), and there the Go value rounded up
// is exactly the script's.
func micros(d algorithm.Decision) algorithm.Decision {
	up := func(x time.Duration) time.Duration {
		return (x + time.Microsecond - 1) / time.Microsecond * time.Microsecond
	}
	d.ResetAfter, d.RetryAfter, d.Delay = up(d.ResetAfter), up(d.RetryAfter), up(d.Delay)
	return d
}

// TestDifferentialRandomConfigs draws random limits (every algorithm, random
// limits, windows, capacities, rates, bursts, tolerances and delays, all in
// whole milliseconds) and replays a random trace through each, requiring
// identical decisions and merged states.
func TestDifferentialRandomConfigs(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(99, 3))
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	ran, skipped := 0, 0
	defer func() { t.Logf("%d random limits replayed, %d skipped", ran, skipped) }()
	for n := range 90 {
		c := algorithm.Config{
			Algorithm: algorithm.Names()[n%len(algorithm.Names())],
			Limit:     1 + rng.Int64N(40),
			Window:    ms(1, 5000),
		}
		switch c.Algorithm {
		case algorithm.SlidingWindow:
			c.Slices = 1 + rng.IntN(8)
			c.Window = time.Duration(c.Slices) * ms(1, 800)
		case algorithm.TokenBucket:
			c.Capacity = 1 + rng.Int64N(20)
			if rng.IntN(2) == 0 {
				c.Rate = float64([]int{1, 2, 4, 5, 8, 10, 20, 50, 100, 1000}[rng.IntN(10)])
			}
		case algorithm.GCRA:
			c.Burst = 1 + rng.Int64N(10)
		case algorithm.BoundedLog:
			c.Tolerance = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1}[rng.IntN(6)]
		case algorithm.LeakyBucket:
			c.MaxDelay = ms(0, 3000)
		case algorithm.Concurrency:
			if rng.IntN(2) == 0 {
				c.Window = 0
			}
		}
		a, err := algorithm.New(c)
		if err != nil {
			t.Fatalf("config %+v: %v", c, err)
		}
		if _, err := s.specFor(a); err != nil {
			t.Fatalf("config %+v: %v", c, err)
		}
		switch c.Algorithm {
		case algorithm.TokenBucket, algorithm.GCRA, algorithm.LeakyBucket:
			if p, _ := paramsOf(a); p.Interval%time.Microsecond != 0 {
				skipped++
				continue // an interval Redis rounds up to whole µs
			}
		}
		ran++
		ref := &goRef{alg: a, states: map[string][]int64{}}
		now := t0 + int64(rng.IntN(100000))*int64(time.Millisecond)
		for step := range 150 {
			switch r := rng.IntN(100); {
			case r < 3:
				now -= int64(rng.IntN(500)) * int64(time.Millisecond)
			case r < 10:
				now += int64(rng.IntN(2*int(max(c.Window, time.Second)/time.Millisecond))) * int64(time.Millisecond)
			default:
				now += int64(rng.IntN(int(max(c.Window, time.Second)/time.Millisecond)/int(c.Limit)+1)) * int64(time.Millisecond)
			}
			key := fmt.Sprint(n, []string{"p", "q"}[rng.IntN(2)]) // configs may repeat
			cost := 1 + rng.Int64N(min(c.Limit, 3))
			if rng.IntN(30) == 0 {
				cost = c.Limit + 1
			}
			req := store.Request{Algorithm: a, Key: key, Cost: cost}
			switch op := rng.IntN(10); {
			case op == 0:
				ev := []store.Event{{Time: now - int64(rng.IntN(2000))*int64(time.Millisecond), Cost: 1 + rng.Int64N(3)}}
				a.Record(ref.state(key), ev[0].Time, ev[0].Cost)
				b := []store.SyncBatch{{Algorithm: a, Key: key, Events: ev}}
				if err := s.Sync(ctx, now, b); err != nil {
					t.Fatal(err)
				}
				if !sameState(a, b[0].State, ref.state(key)) {
					t.Fatalf("%+v step %d merge %v:\nredis %v\ngo    %v", c, step, ev, b[0].State, ref.state(key))
				}
			case op == 1 && c.Algorithm == algorithm.Concurrency:
				a.Release(ref.state(key), now, cost)
				if err := s.Release(ctx, now, []store.Request{req}); err != nil {
					t.Fatal(err)
				}
			default:
				want := micros(a.Decide(ref.state(key), now, cost))
				got, err := s.DecideOne(ctx, now, req)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("%+v step %d cost %d:\nredis %+v\ngo    %+v", c, step, cost, got, want)
				}
			}
		}
	}
}

// intervalNS returns a bucket algorithm's emission interval in nanoseconds.
func intervalNS(a algorithm.Algorithm) int64 {
	p, _ := paramsOf(a)
	return int64(p.Interval)
}

// TestRoundedInterval checks the one place Redis departs from Go on whole
// microsecond inputs: a rate whose interval is not whole microseconds
// (3,000/s: 333,334 ns in Go) refills every 334 µs in Redis, 0.2% slower and
// never faster. Offered every 100 µs for 0.3 s, a bucket of 1 accepts at
// every fourth tick in both; after the last acceptance Redis's state is one
// rounded interval (666 ns) further ahead than Go's.
func TestRoundedInterval(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.TokenBucket, Limit: 3000, Window: time.Second, Capacity: 1, Rate: 3000})
	if got := intervalNS(a); got != 333_334 {
		t.Fatalf("Go interval %d ns, want 333,334", got)
	}
	st := make([]int64, a.Words())
	goAcc, redisAcc := 0, 0
	const n, step = 3000, 100 * time.Microsecond
	for i := range int64(n) {
		now := t0 + i*int64(step)
		if a.Decide(st, now, 1).Allowed {
			goAcc++
		}
		d, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: "rate3000", Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			redisAcc++
		}
	}
	b := []store.SyncBatch{{Algorithm: a, Key: "rate3000"}}
	if err := s.Sync(ctx, t0, b); err != nil {
		t.Fatal(err)
	}
	if goAcc != redisAcc {
		t.Fatalf("accepted: go %d, redis %d", goAcc, redisAcc)
	}
	goTat, redisTat := st[0], b[0].State[0]
	last := t0 + (n-1)*int64(step)
	t.Logf("accepted %d; after the last acceptance Go's bucket is full again %v later, Redis's %v",
		goAcc, time.Duration(goTat-last), time.Duration(redisTat-last))
	if redisTat-goTat != 334_000-333_334 {
		t.Fatalf("Redis tat - Go tat = %d ns, want one interval's rounding, 666 ns", redisTat-goTat)
	}
}
