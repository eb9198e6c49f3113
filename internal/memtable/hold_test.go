package memtable

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

// TestHoldMatchesAlgorithm applies random hold operations and decisions to
// keys of the store and to states of the algorithm kept beside it: every
// answer is the same, whatever the state's size or place in the table.
func TestHoldMatchesAlgorithm(t *testing.T) {
	for _, c := range []algorithm.Config{
		{Algorithm: algorithm.BoundedLog, Limit: 500, Window: 10 * time.Second, Holds: 64, HoldTTL: 2 * time.Second},
		{Algorithm: algorithm.SlidingLog, Limit: 40, Window: 5 * time.Second, Holds: 4},
		{Algorithm: algorithm.FixedWindow, Limit: 100, Window: time.Second, Holds: 2, HoldTTL: 3 * time.Second},
	} {
		a, err := algorithm.New(c)
		if err != nil {
			t.Fatal(err)
		}
		h := a.(store.HoldAlgorithm)
		s := New(Options{})
		rng := rand.New(rand.NewPCG(1, 2))
		keys := []string{"a", "b", "c"}
		model := map[string][]int64{}
		ids := []lease.ID{lease.New(), lease.New(), lease.New(), lease.New()}
		seqs := make([]int64, len(ids))
		now := 100 * sec
		for i := range 5000 {
			now += rng.Int64N(int64(c.Window) / 20)
			key := keys[rng.IntN(len(keys))]
			st, ok := model[key]
			if !ok {
				st = make([]int64, a.Words())
				model[key] = st
			}
			cost := rng.Int64N(3)
			if rng.IntN(3) == 0 {
				d, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: key, Cost: cost + 1})
				if err != nil {
					t.Fatal(err)
				}
				if want := a.Decide(st, now, cost+1); d != want {
					t.Fatalf("%s op %d: store decided %+v, algorithm %+v", c.Algorithm, i, d, want)
				}
				continue
			}
			j := rng.IntN(len(ids))
			if rng.IntN(5) > 0 {
				seqs[j]++
			}
			op := lease.Op{ID: ids[j], Seq: max(seqs[j], 1), Spent: rng.Int64N(20), Target: rng.Int64N(c.Limit / 2)}
			d, held, err := s.Hold(ctx, now, store.Request{Algorithm: a, Key: key, Cost: cost}, op)
			if err != nil {
				t.Fatal(err)
			}
			if wd, wh := h.Hold(st, now, cost, op); d != wd || held != wh {
				t.Fatalf("%s op %d: store %+v %+v, algorithm %+v %+v", c.Algorithm, i, d, held, wd, wh)
			}
		}
		for key, st := range model {
			b := []store.SyncBatch{{Algorithm: a, Key: key}}
			if err := s.Sync(ctx, now, b); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(b[0].State, st) {
				t.Fatalf("%s key %s: store state differs from the algorithm's", c.Algorithm, key)
			}
		}
	}
}

// TestHoldConcurrent: holders and plain requests on one key from many
// goroutines; the units granted, spent and decided never exceed the limit
// within the window (no clock moves).
func TestHoldConcurrent(t *testing.T) {
	a, err := algorithm.New(algorithm.Config{Limit: 10_000, Window: time.Hour, Holds: 16})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{})
	now := 100 * sec
	var mu sync.Mutex
	total := int64(0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			id := lease.New()
			seq := int64(0)
			for range 300 {
				if g%2 == 0 {
					d, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: "k", Cost: 10})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						total += 10
						mu.Unlock()
					}
					continue
				}
				seq++
				d, held, err := s.Hold(ctx, now, store.Request{Algorithm: a, Key: "k", Cost: 1}, lease.Op{ID: id, Seq: seq, Target: 200})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				total += held.Granted
				if d.Allowed {
					total++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if total > 10_000 {
		t.Fatalf("%d units granted and decided, limit 10000", total)
	}
	if total < 9_000 {
		t.Fatalf("only %d units granted and decided of 10000: grants stopped too early", total)
	}
}

// TestHoldNeedsHolds: an algorithm without holds is ErrNoHolds.
func TestHoldNeedsHolds(t *testing.T) {
	s := New(Options{})
	a := newCounter(10, time.Minute, 1)
	_, _, err := s.Hold(ctx, 1, store.Request{Algorithm: a, Key: "k"}, lease.Op{ID: lease.New(), Seq: 1, Target: 1})
	if !errors.Is(err, store.ErrNoHolds) {
		t.Fatalf("got %v, want ErrNoHolds", err)
	}
}
