package memtable

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// modelStore is the simplest correct store: a map from (Config, key) to
// state that never forgets anything. The memory store must decide exactly
// as it does, although it drops idle keys, sweeps, and keeps hashes instead
// of keys: an algorithm promises that a state idle for IdleAfter() decides
// like a zero state.
type modelStore map[modelKey][]int64

type modelKey struct {
	cfg algorithm.Config
	key string
}

func (m modelStore) state(a algorithm.Algorithm, key string) []int64 {
	k := modelKey{a.Config(), key}
	st, ok := m[k]
	if !ok {
		st = make([]int64, a.Words())
		m[k] = st
	}
	return st
}

func (m modelStore) decide(now int64, reqs []store.Request, out []algorithm.Decision) {
	copies := make([][]int64, len(reqs))
	for i, r := range reqs {
		copies[i] = append([]int64(nil), m.state(r.Algorithm, r.Key)...)
		for j := range i { // the same limit and key share one copy
			if reqs[j].Algorithm.Config() == r.Algorithm.Config() && reqs[j].Key == r.Key {
				copies[i] = copies[j]
				break
			}
		}
	}
	commit := true
	for i, r := range reqs {
		out[i] = r.Algorithm.Decide(copies[i], now, r.Cost)
		if !out[i].Allowed && !r.Shadow {
			commit = false
		}
	}
	if commit {
		for i, r := range reqs {
			copy(m.state(r.Algorithm, r.Key), copies[i])
		}
	}
}

// TestMatchesModel drives the memory store and the model with the same
// random traffic through every algorithm, with clock jumps past the idle
// time, and requires identical decisions.
func TestMatchesModel(t *testing.T) {
	var algs []algorithm.Algorithm
	for _, c := range []algorithm.Config{
		{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Second},
		{Algorithm: algorithm.SlidingWindow, Limit: 6, Window: time.Second, Slices: 4},
		{Algorithm: algorithm.WeightedWindow, Limit: 5, Window: time.Second},
		{Algorithm: algorithm.SlidingLog, Limit: 4, Window: time.Second},
		{Algorithm: algorithm.TokenBucket, Limit: 5, Window: time.Second, Capacity: 3},
		{Algorithm: algorithm.GCRA, Limit: 5, Window: time.Second, Burst: 2},
		{Algorithm: algorithm.LeakyBucket, Limit: 5, Window: time.Second},
		{Algorithm: algorithm.Concurrency, Limit: 3},
		{Algorithm: algorithm.BoundedLog, Limit: 8, Window: time.Second, Tolerance: 0.25},
	} {
		a, err := algorithm.New(c)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		algs = append(algs, a)
	}
	steps := 20_000
	if raceEnabled {
		steps = 4_000
	}
	swept := 0
	for seed := range uint64(3) {
		r := rand.New(rand.NewPCG(seed, 99))
		s := New(Options{Shards: 4, MaxKeys: 1 << 20})
		m := modelStore{}
		now := int64(1_000) * sec
		got := make([]algorithm.Decision, 3)
		want := make([]algorithm.Decision, 3)
		for step := range steps {
			switch x := r.IntN(100); {
			case x < 3:
				now += int64(r.IntN(5)+1) * sec // long enough for keys to go idle
			case x < 60:
				now += int64(r.IntN(int(50 * time.Millisecond)))
			}
			n := 1 + r.IntN(3)
			reqs := make([]store.Request, n)
			for i := range reqs {
				reqs[i] = store.Request{
					Algorithm: algs[r.IntN(len(algs))],
					Key:       fmt.Sprint("k", r.IntN(20)),
					Cost:      int64(r.IntN(3)), // 0 is a bad cost: rejected by both
					Shadow:    r.IntN(4) == 0,
				}
			}
			switch op := r.IntN(20); {
			case op == 0:
				swept += s.Sweep(now)
				continue
			case op == 2:
				// Another node's counts arrive (delayed synchronization).
				b := []store.SyncBatch{{Algorithm: reqs[0].Algorithm, Key: reqs[0].Key}}
				for range r.IntN(3) {
					e := store.Event{Time: now - int64(r.IntN(int(20*time.Millisecond))), Cost: 1 + int64(r.IntN(2))}
					b[0].Events = append(b[0].Events, e)
					b[0].Algorithm.Record(m.state(b[0].Algorithm, b[0].Key), e.Time, e.Cost)
				}
				if err := s.Sync(ctx, now, b); err != nil {
					t.Fatal(err)
				}
				continue
			case op == 1:
				// Release on both (the model applies it to its state).
				if err := s.Release(ctx, now, reqs); err != nil {
					t.Fatal(err)
				}
				for _, q := range reqs {
					q.Algorithm.Release(m.state(q.Algorithm, q.Key), now, q.Cost)
				}
				continue
			case op < 10 || n == 1:
				d, err := s.DecideOne(ctx, now, reqs[0])
				if err != nil {
					t.Fatal(err)
				}
				got[0], n = d, 1
				m.decide(now, reqs[:1], want[:1])
			default:
				if err := s.Decide(ctx, now, reqs, got[:n]); err != nil {
					t.Fatal(err)
				}
				m.decide(now, reqs, want[:n])
			}
			for i := range n {
				if got[i] != want[i] {
					t.Fatalf("seed %d step %d request %d (%s %s cost %d shadow %v): store %+v, model %+v",
						seed, step, i, reqs[i].Algorithm.Name(), reqs[i].Key, reqs[i].Cost, reqs[i].Shadow, got[i], want[i])
				}
			}
		}
	}
	if swept == 0 {
		t.Fatal("no key ever went idle: the test did not exercise expiry")
	}
	t.Logf("%d idle keys swept along the way", swept)
}
