package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

// TestHoldDifferential applies random quota lease ops (new leases, top-ups,
// spends, give-backs, repeats, expiries), plain decisions and merges to
// Redis and to the Go algorithm on millisecond traces: every answer and
// every state is identical.
func TestHoldDifferential(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	for ci, c := range []algorithm.Config{
		{Algorithm: algorithm.BoundedLog, Limit: 200, Window: time.Second, Tolerance: 0.05, Holds: 8, HoldTTL: 300 * time.Millisecond},
		{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute, Holds: 64},
		{Algorithm: algorithm.SlidingLog, Limit: 30, Window: 500 * time.Millisecond, Holds: 3, HoldTTL: time.Second},
		{Algorithm: algorithm.FixedWindow, Limit: 50, Window: time.Second, Holds: 4, HoldTTL: 200 * time.Millisecond},
	} {
		t.Run(name(c), func(t *testing.T) {
			a := mustAlg(t, c)
			h := a.(store.HoldAlgorithm)
			ref := &goRef{alg: a, states: map[string][]int64{}}
			rng := rand.New(rand.NewPCG(uint64(ci), 9))
			keys := []string{"a", "b"}
			ids := []lease.ID{lease.New(), lease.New(), lease.New(), lease.New(), lease.New()}
			seqs := make([]int64, len(ids))
			now := t0
			limit := a.Config().Limit
			for i := range 1500 {
				for _, k := range keys {
					b := []store.SyncBatch{{Algorithm: a, Key: k}}
					if err := s.Sync(ctx, now, b); err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(b[0].State, ref.state(k)) {
						t.Fatalf("before step %d key %s: states differ\nredis %v\ngo    %v", i, k, b[0].State, ref.state(k))
					}
				}
				now += int64(rng.IntN(40)) * int64(time.Millisecond)
				key := keys[rng.IntN(len(keys))]
				st := ref.state(key)
				switch r := rng.IntN(10); {
				case r < 3:
					cost := 1 + rng.Int64N(limit/4+1)
					got, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: key, Cost: cost})
					if err != nil {
						t.Fatal(err)
					}
					// The script writes a state back only when the request is
					// allowed: a rejected one leaves expired holds for the
					// next op to record (later: counted longer, never less).
					x := slices.Clone(st)
					want := a.Decide(x, now, cost)
					if got != want {
						t.Fatalf("step %d decide: redis %+v, go %+v", i, got, want)
					}
					if want.Allowed {
						copy(st, x)
					}
				case r < 4:
					cost := 1 + rng.Int64N(5)
					b := []store.SyncBatch{{Algorithm: a, Key: key, Events: []store.Event{{Time: now, Cost: cost}}}}
					if err := s.Sync(ctx, now, b); err != nil {
						t.Fatal(err)
					}
					a.Record(st, now, cost)
					if !slices.Equal(b[0].State, st) {
						t.Fatalf("step %d sync: redis state differs from go's", i)
					}
				default:
					j := rng.IntN(len(ids))
					if rng.IntN(6) > 0 {
						seqs[j]++
					}
					op := lease.Op{ID: ids[j], Seq: max(seqs[j], 1), Spent: rng.Int64N(limit / 4), Target: rng.Int64N(limit / 2)}
					if rng.IntN(8) == 0 {
						op.Target = 0
					}
					cost := rng.Int64N(3)
					d, held, err := s.Hold(ctx, now, store.Request{Algorithm: a, Key: key, Cost: cost}, op)
					if err != nil {
						t.Fatal(err)
					}
					if wd, wh := h.Hold(st, now, cost, op); d != wd || held != wh {
						t.Fatalf("step %d hold %+v cost %d: redis %+v %+v, go %+v %+v", i, op, cost, d, held, wd, wh)
					}
				}
			}
		})
	}
}

// A limit without holds is ErrNoHolds; sliding-window keeps none.
func TestHoldNoHolds(t *testing.T) {
	s := newStore(t, Options{})
	a := mustAlg(t, algorithm.Config{Limit: 5, Window: time.Second})
	if _, _, err := s.Hold(context.Background(), t0, store.Request{Algorithm: a, Key: "k"}, lease.Op{ID: lease.New(), Seq: 1, Target: 1}); !errors.Is(err, store.ErrNoHolds) {
		t.Fatalf("got %v", err)
	}
	if _, err := algorithm.New(algorithm.Config{Algorithm: algorithm.SlidingWindow, Limit: 5, Window: time.Second, Holds: 2}); err == nil {
		t.Fatal("sliding-window with holds accepted")
	}
}
