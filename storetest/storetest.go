// Package storetest checks that a counter store keeps the contract
// Floodgate's limiters rely on (package store). A store's own tests run it:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return mystore.New() })
//	}
//
// Run decides random traces of every algorithm through the store and through
// the algorithm itself on a local state, and requires every decision to be
// the same (durations may be rounded up to whole microseconds, the
// resolution of a store that keeps time in microseconds, never down); it checks that Decide counts all of a call or nothing, that keys
// are any bytes and that limits never share state, that concurrent callers
// are counted exactly, and, for a store that implements them, the optional
// interfaces store.Syncer, store.Leaser and store.Resetter. The store must
// decide at the time it is given: a store that can read its own clock (the
// Redis store's server time) runs the suite with the caller's clock.
//
// The memory store and the Redis store pass it (their TestConformance).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

// Run checks the store that newStore returns; newStore is called once per
// check and must return an empty store (a fresh one, or one with a fresh
// key prefix), cleaned up by the test's Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	checks := []struct {
		name string
		run  func(*testing.T, store.Store)
	}{
		{"Differential", differential},
		{"AllOrNothing", allOrNothing},
		{"SameKeyTwice", sameKeyTwice},
		{"KeysAreBytes", keysAreBytes},
		{"LimitsApart", limitsApart},
		{"Concurrent", concurrent},
		{"NoAlgorithm", noAlgorithm},
		{"Release", release},
		{"Syncer", syncer},
		{"Leaser", leaser},
		{"Resetter", resetter},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

// t0 is a realistic Unix time in nanoseconds, on a millisecond.
const t0 = int64(1_764_470_000_000) * int64(time.Millisecond)

// Configs are limits of every algorithm whose time parameters are whole
// microseconds, so that a store keeping time in microseconds (as Redis's
// scripts do) decides exactly as the Go algorithms on millisecond traces.
var Configs = []algorithm.Config{
	{Algorithm: algorithm.FixedWindow, Limit: 10, Window: time.Second},
	{Algorithm: algorithm.SlidingWindow, Limit: 20, Window: 1200 * time.Millisecond, Slices: 12},
	{Algorithm: algorithm.WeightedWindow, Limit: 15, Window: time.Second},
	{Algorithm: algorithm.SlidingLog, Limit: 8, Window: 500 * time.Millisecond},
	{Algorithm: algorithm.TokenBucket, Limit: 10, Window: time.Second, Capacity: 5},
	{Algorithm: algorithm.GCRA, Limit: 10, Window: time.Second, Burst: 3},
	{Algorithm: algorithm.LeakyBucket, Limit: 5, Window: time.Second, MaxDelay: 600 * time.Millisecond},
	{Algorithm: algorithm.Concurrency, Limit: 3, Window: 2 * time.Second},
	{Algorithm: algorithm.BoundedLog, Limit: 20, Window: time.Second, Tolerance: 0.1},
	{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute},
}

// same reports whether a store's decision got is the algorithm's want,
// allowing each duration to be rounded up to a whole microsecond.
func same(got, want algorithm.Decision) bool {
	up := func(x time.Duration) time.Duration {
		return (x + time.Microsecond - 1) / time.Microsecond * time.Microsecond
	}
	close := func(g, w time.Duration) bool { return g == w || g == up(w) }
	if !close(got.ResetAfter, want.ResetAfter) || !close(got.RetryAfter, want.RetryAfter) || !close(got.Delay, want.Delay) {
		return false
	}
	got.ResetAfter, got.RetryAfter, got.Delay = want.ResetAfter, want.RetryAfter, want.Delay
	return got == want
}

func mustAlg(t *testing.T, c algorithm.Config) algorithm.Algorithm {
	t.Helper()
	a, err := algorithm.New(c)
	if err != nil {
		t.Fatalf("algorithm.New(%+v): %v", c, err)
	}
	return a
}

// reference is the algorithm deciding on states of its own: what the store
// must answer.
type reference struct {
	alg    algorithm.Algorithm
	states map[string][]int64
}

func newReference(a algorithm.Algorithm) *reference {
	return &reference{alg: a, states: map[string][]int64{}}
}

func (r *reference) state(key string) []int64 {
	s, ok := r.states[key]
	if !ok {
		s = make([]int64, r.alg.Words())
		r.states[key] = s
	}
	return s
}

// differential replays random millisecond traces (costs from 0 to above
// the limit, a clock that sometimes steps back, releases) through the store
// and the reference, and requires every decision to be the same.
func differential(t *testing.T, s store.Store) {
	ctx := context.Background()
	keys := []string{"a", "b", "\xff\xfe not UTF-8"}
	for ci, c := range Configs {
		a := mustAlg(t, c)
		ref := newReference(a)
		rng := rand.New(rand.NewPCG(uint64(ci), 11))
		now := t0
		for step := range 300 {
			now += int64(rng.IntN(120)) * int64(time.Millisecond)
			if rng.IntN(20) == 0 {
				now -= int64(rng.IntN(50)) * int64(time.Millisecond) // a node whose clock is behind
			}
			key := keys[rng.IntN(len(keys))]
			cost := int64(rng.IntN(int(c.Limit)/3 + 2))
			if rng.IntN(40) == 0 {
				cost = c.Limit + 1
			}
			if c.Algorithm == algorithm.Concurrency && rng.IntN(3) == 0 {
				if err := s.Release(ctx, now, []store.Request{{Algorithm: a, Key: key, Cost: 1}}); err != nil {
					t.Fatalf("%s step %d: Release: %v", c.Algorithm, step, err)
				}
				a.Release(ref.state(key), now, 1)
				continue
			}
			want := a.Decide(ref.state(key), now, cost)
			got, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: key, Cost: cost})
			if err != nil {
				t.Fatalf("%s step %d: DecideOne: %v", c.Algorithm, step, err)
			}
			if !same(got, want) {
				t.Fatalf("%s (%+v) step %d, key %q, cost %d at +%v:\n store %+v\n  want %+v",
					c.Algorithm, c, step, key, cost, time.Duration(now-t0), got, want)
			}
		}
	}
}

// fixed returns a fixed window of limit per hour.
func fixed(t *testing.T, limit int64) algorithm.Algorithm {
	return mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: limit, Window: time.Hour})
}

// remaining returns what key has left under a, asked with a request of
// cost 0, which counts nothing.
func remaining(t *testing.T, s store.Store, a algorithm.Algorithm, key string, now int64) int64 {
	t.Helper()
	d, err := s.DecideOne(context.Background(), now, store.Request{Algorithm: a, Key: key})
	if err != nil {
		t.Fatalf("DecideOne(%q, cost 0): %v", key, err)
	}
	return d.Remaining
}

// allOrNothing: a call whose one request is rejected counts none of its
// requests; a rejected Shadow request stops nothing.
func allOrNothing(t *testing.T, s store.Store) {
	ctx := context.Background()
	tight, loose := fixed(t, 1), fixed(t, 5)
	if _, err := s.DecideOne(ctx, t0, store.Request{Algorithm: tight, Key: "x", Cost: 1}); err != nil {
		t.Fatal(err)
	}
	reqs := []store.Request{{Algorithm: tight, Key: "x", Cost: 1}, {Algorithm: loose, Key: "y", Cost: 2}}
	out := make([]algorithm.Decision, 2)
	if err := s.Decide(ctx, t0, reqs, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Allowed || !out[1].Allowed {
		t.Fatalf("decisions %+v: want the spent limit rejected, the other allowed", out)
	}
	if r := remaining(t, s, loose, "y", t0); r != 5 {
		t.Fatalf("y has %d left after a call another limit rejected, want 5: nothing counted", r)
	}
	reqs[0].Shadow = true
	if err := s.Decide(ctx, t0, reqs, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Allowed || !out[1].Allowed {
		t.Fatalf("with the spent limit in shadow: %+v", out)
	}
	if r := remaining(t, s, loose, "y", t0); r != 3 {
		t.Fatalf("y has %d left after a call whose rejection was shadow, want 3", r)
	}
}

// sameKeyTwice: requests of one call that name the same limit and key see
// each other, in order.
func sameKeyTwice(t *testing.T, s store.Store) {
	a := fixed(t, 3)
	reqs := []store.Request{{Algorithm: a, Key: "k", Cost: 2}, {Algorithm: a, Key: "k", Cost: 2}}
	out := make([]algorithm.Decision, 2)
	if err := s.Decide(context.Background(), t0, reqs, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed || out[1].Allowed {
		t.Fatalf("two requests of 2 on a limit of 3 in one call: %+v, want the first allowed, the second not", out)
	}
	if r := remaining(t, s, a, "k", t0); r != 3 {
		t.Fatalf("%d left after a call that was rejected, want 3", r)
	}
}

// keysAreBytes: any bytes make a key, and keys that differ count apart.
func keysAreBytes(t *testing.T, s store.Store) {
	a := fixed(t, 2)
	keys := []string{"", "a", "A", "a ", "\x00", "\xff\xfe", "ключ", "a:b", "a}{b", strings.Repeat("k", 4096), strings.Repeat("k", 4095) + "l"}
	for i, k := range keys {
		for range i%2 + 1 {
			if d, err := s.DecideOne(context.Background(), t0, store.Request{Algorithm: a, Key: k, Cost: 1}); err != nil || !d.Allowed {
				t.Fatalf("key %q: %+v %v", k, d, err)
			}
		}
	}
	for i, k := range keys {
		if r, want := remaining(t, s, a, k, t0), int64(2-(i%2+1)); r != want {
			t.Errorf("key %q (%d bytes) has %d left, want %d: keys share a count", k, len(k), r, want)
		}
	}
}

// limitsApart: the same key under two limits keeps two counts.
func limitsApart(t *testing.T, s store.Store) {
	one, other := fixed(t, 4), mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 4, Window: time.Minute})
	if _, err := s.DecideOne(context.Background(), t0, store.Request{Algorithm: one, Key: "k", Cost: 3}); err != nil {
		t.Fatal(err)
	}
	if r := remaining(t, s, other, "k", t0); r != 4 {
		t.Fatalf("k has %d left under another limit, want 4", r)
	}
}

// concurrent: 8 goroutines deciding one key at once are counted exactly.
func concurrent(t *testing.T, s store.Store) {
	a := fixed(t, 100)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				d, err := s.DecideOne(context.Background(), t0+int64(g*30+i), store.Request{Algorithm: a, Key: "hot", Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if allowed != 100 {
		t.Fatalf("240 concurrent requests on a limit of 100: %d allowed", allowed)
	}
}

// noAlgorithm: a request without an algorithm is store.ErrNoAlgorithm.
func noAlgorithm(t *testing.T, s store.Store) {
	if _, err := s.DecideOne(context.Background(), t0, store.Request{Key: "k", Cost: 1}); !errors.Is(err, store.ErrNoAlgorithm) {
		t.Fatalf("DecideOne without an algorithm: %v, want store.ErrNoAlgorithm", err)
	}
	out := make([]algorithm.Decision, 1)
	if err := s.Decide(context.Background(), t0, []store.Request{{Key: "k", Cost: 1}}, out); !errors.Is(err, store.ErrNoAlgorithm) {
		t.Fatalf("Decide without an algorithm: %v, want store.ErrNoAlgorithm", err)
	}
}

// release: a concurrency limit's units come back on Release.
func release(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.Concurrency, Limit: 2})
	req := store.Request{Algorithm: a, Key: "c", Cost: 1}
	for i := range 3 {
		d, err := s.DecideOne(ctx, t0, req)
		if err != nil || d.Allowed != (i < 2) {
			t.Fatalf("request %d on 2 in flight: %+v %v", i, d, err)
		}
	}
	if err := s.Release(ctx, t0, []store.Request{req}); err != nil {
		t.Fatal(err)
	}
	if d, err := s.DecideOne(ctx, t0, req); err != nil || !d.Allowed {
		t.Fatalf("after a release: %+v %v", d, err)
	}
}

// syncer: for a store.Syncer, Sync merges events as the algorithm's Record
// does and returns the merged state; a batch without events only reads.
func syncer(t *testing.T, s store.Store) {
	sy, ok := s.(store.Syncer)
	if !ok {
		t.Skip("the store is not a store.Syncer")
	}
	ctx := context.Background()
	for _, c := range Configs {
		if c.Algorithm == algorithm.Concurrency {
			continue
		}
		a := mustAlg(t, c)
		ref := newReference(a)
		rng := rand.New(rand.NewPCG(7, uint64(c.Limit)))
		now := t0
		for round := range 5 {
			var evs []store.Event
			for range rng.IntN(6) {
				now += int64(rng.IntN(40)) * int64(time.Millisecond)
				evs = append(evs, store.Event{Time: now, Cost: int64(rng.IntN(3) + 1)})
			}
			for _, e := range evs {
				a.Record(ref.state("s"), e.Time, e.Cost)
			}
			b := []store.SyncBatch{{Algorithm: a, Key: "s", Events: evs}}
			if err := sy.Sync(ctx, now, b); err != nil {
				t.Fatalf("%s round %d: Sync: %v", c.Algorithm, round, err)
			}
			if got, want := fmt.Sprint(b[0].State), fmt.Sprint(ref.state("s")); got != want {
				t.Fatalf("%s round %d: Sync returned %s, want %s (the algorithm's Record)", c.Algorithm, round, got, want)
			}
		}
		// The merged state decides as the reference's does.
		want := a.Decide(ref.state("s"), now, 1)
		if got, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: "s", Cost: 1}); err != nil || !same(got, want) {
			t.Fatalf("%s: after the syncs DecideOne = %+v %v, want %+v", c.Algorithm, got, err, want)
		}
	}
}

// leaser: for a store.Leaser, only the lease that holds units gives them
// back, once.
func leaser(t *testing.T, s store.Store) {
	ls, ok := s.(store.Leaser)
	if !ok {
		t.Skip("the store is not a store.Leaser")
	}
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.Concurrency, Limit: 1, Window: time.Minute})
	reqs := []store.Request{{Algorithm: a, Key: "l", Cost: 1}}
	out := make([]algorithm.Decision, 1)
	id, other := lease.New(), lease.New()
	if err := ls.Acquire(ctx, t0, id, reqs, out); err != nil || !out[0].Allowed {
		t.Fatalf("Acquire: %+v %v", out, err)
	}
	if err := ls.Acquire(ctx, t0, other, reqs, out); err != nil || out[0].Allowed {
		t.Fatalf("a second Acquire on a limit of 1: %+v %v, want rejected", out, err)
	}
	if held, err := ls.ReleaseLease(ctx, t0, other, reqs); err != nil || held {
		t.Fatalf("ReleaseLease of a lease that holds nothing: %v %v, want false", held, err)
	}
	if held, err := ls.ReleaseLease(ctx, t0, id, reqs); err != nil || !held {
		t.Fatalf("ReleaseLease of the holder: %v %v, want true", held, err)
	}
	if held, _ := ls.ReleaseLease(ctx, t0, id, reqs); held {
		t.Fatal("a second ReleaseLease of the same lease gave units back again")
	}
	if err := ls.Acquire(ctx, t0, other, reqs, out); err != nil || !out[0].Allowed {
		t.Fatalf("Acquire after the release: %+v %v", out, err)
	}
}

// resetter: for a store.Resetter, Reset gives a key its whole allowance
// back under one limit and touches no other.
func resetter(t *testing.T, s store.Store) {
	rs, ok := s.(store.Resetter)
	if !ok {
		t.Skip("the store is not a store.Resetter")
	}
	ctx := context.Background()
	a, b := fixed(t, 3), fixed(t, 4)
	for _, alg := range []algorithm.Algorithm{a, b} {
		if _, err := s.DecideOne(ctx, t0, store.Request{Algorithm: alg, Key: "r", Cost: 3}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rs.Reset(ctx, a, "r"); err != nil {
		t.Fatal(err)
	}
	if err := rs.Reset(ctx, a, "never-seen"); err != nil {
		t.Fatalf("Reset of a key the store does not hold: %v", err)
	}
	if ra, rb := remaining(t, s, a, "r", t0), remaining(t, s, b, "r", t0); ra != 3 || rb != 1 {
		t.Fatalf("after Reset under one limit: %d and %d left, want 3 (reset) and 1 (untouched)", ra, rb)
	}
}
