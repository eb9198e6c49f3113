package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/memstore"
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
					// A rejected decision changes nothing on Redis, which
					// writes back only what it allowed; in Go the inner
					// algorithm may tidy its state when it rejects.
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
					op := lease.Op{ID: ids[j], Seq: max(seqs[j], 1), Spent: rng.Int64N(6), Target: rng.Int64N(limit / 2)}
					if rng.IntN(4) == 0 {
						op.Spent = rng.Int64N(limit / 4)
					}
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

// TestHoldConcurrentShared: plain decisions (shared script calls, op 'i')
// and lease ops from many goroutines on one key: what was allowed plus
// what leases spent stays within the limit (an hour's window: no unit
// leaves it during the test).
func TestHoldConcurrentShared(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Limit: 3000, Window: time.Hour, Holds: 16})
	var mu sync.Mutex
	used := int64(0)
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			if g%3 != 0 {
				for range 400 {
					out := make([]algorithm.Decision, 1)
					err := s.Decide(ctx, time.Now().UnixNano(), []store.Request{{Algorithm: a, Key: "k", Cost: 1}}, out)
					d := out[0]
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						used++
						mu.Unlock()
					}
				}
				return
			}
			id, seq, avail, spent := lease.New(), int64(0), int64(0), int64(0)
			for range 100 {
				seq++
				_, held, err := s.Hold(ctx, time.Now().UnixNano(), store.Request{Algorithm: a, Key: "k"}, lease.Op{ID: id, Seq: seq, Spent: spent, Target: 50})
				if err != nil {
					t.Error(err)
					return
				}
				avail += held.Granted
				spent = avail // spend all of it before the next op
				mu.Lock()
				used += avail
				mu.Unlock()
				avail = 0
			}
		})
	}
	wg.Wait()
	if used > 3000+150 {
		t.Fatalf("%d units allowed or spent, limit 3000 (bound 3150)", used)
	}
	t.Logf("%d units allowed or spent of 3000", used)
}

// TestHoldBesideMemory interleaves lease ops (spending what they got) and
// plain decisions on one key, on Redis's own clock and on the memory
// store: both answer alike. (It caught a bounded-log merge that cleared
// words past its own state, where the holds are.)
func TestHoldBesideMemory(t *testing.T) {
	rs := newStore(t, Options{})
	ms := memstore.New(memstore.Options{})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Limit: 3000, Window: time.Hour, Holds: 16})
	ids := []lease.ID{lease.New(), lease.New(), lease.New(), lease.New()}
	seqs := make([]int64, 4)
	spent := make([]int64, 4)
	rng := rand.New(rand.NewPCG(1, 1)) // seeded: the same ops on both stores
	for i := range 3000 {
		now := time.Now().UnixNano()
		if rng.IntN(3) == 0 {
			j := rng.IntN(4)
			seqs[j]++
			op := lease.Op{ID: ids[j], Seq: seqs[j], Spent: spent[j], Target: 50}
			d1, h1, _ := rs.Hold(ctx, now, store.Request{Algorithm: a, Key: "k"}, op)
			d2, h2, _ := ms.Hold(ctx, now, store.Request{Algorithm: a, Key: "k"}, op)
			if h1.Units != h2.Units || h1.Granted != h2.Granted || d1.Remaining != d2.Remaining {
				t.Fatalf("op %d hold %+v: redis %+v %+v, mem %+v %+v", i, op, d1, h1, d2, h2)
			}
			spent[j] = h1.Granted
			continue
		}
		d1, _ := rs.DecideOne(ctx, now, store.Request{Algorithm: a, Key: "k", Cost: 1})
		d2, _ := ms.DecideOne(ctx, now, store.Request{Algorithm: a, Key: "k", Cost: 1})
		if d1.Allowed != d2.Allowed || d1.Remaining != d2.Remaining {
			t.Fatalf("op %d decide: redis %+v, mem %+v", i, d1, d2)
		}
	}
}

// TestHoldRejectedBesideMemory: leases that expire unreported, then plain
// decisions on the key, many of them rejected, on Redis and on the memory
// store at the same times: every decision is the same, the reset time
// included. A rejected decision records the expired holds on neither
// store; the next allowed one records them at its own time on both.
func TestHoldRejectedBesideMemory(t *testing.T) {
	rs := newStore(t, Options{ClientTime: true})
	ms := memstore.New(memstore.Options{})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.SlidingLog, Limit: 40, Window: time.Second, Holds: 4, HoldTTL: 100 * time.Millisecond})
	rng := rand.New(rand.NewPCG(2, 2))
	now, rejected := t0, 0
	for i := range 2000 {
		now += int64(rng.IntN(15)) * int64(time.Millisecond)
		req := store.Request{Algorithm: a, Key: "k", Cost: 1 + rng.Int64N(3)}
		if rng.IntN(10) == 0 {
			op := lease.Op{ID: lease.New(), Seq: 1, Target: 1 + rng.Int64N(20)} // never renewed
			d1, h1, err1 := rs.Hold(ctx, now, req, op)
			d2, h2, err2 := ms.Hold(ctx, now, req, op)
			if err1 != nil || err2 != nil || d1 != d2 || h1 != h2 {
				t.Fatalf("op %d hold: redis %+v %+v %v, mem %+v %+v %v", i, d1, h1, err1, d2, h2, err2)
			}
			continue
		}
		d1, err1 := rs.DecideOne(ctx, now, req)
		d2, err2 := ms.DecideOne(ctx, now, req)
		if err1 != nil || err2 != nil || d1 != d2 {
			t.Fatalf("op %d decide cost %d: redis %+v %v, mem %+v %v", i, req.Cost, d1, err1, d2, err2)
		}
		if !d1.Allowed {
			rejected++
		}
	}
	if rejected < 100 {
		t.Fatalf("only %d rejections: the key never filled", rejected)
	}
	t.Logf("%d of 2000 operations rejected, every answer alike", rejected)
}

// TestHoldLimitChanges: a bounded log with holds whose limit switches at
// random between two of one Counter (entry sizes 2 and 15) keeps its count
// and its holds on Redis: every decision and lease answer equals the Go
// algorithm's on a state converted (ConvertFrom) at each switch, as the
// memory store converts it.
func TestHoldLimitChanges(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	var algs []algorithm.Algorithm
	for _, c := range []algorithm.Config{
		{Algorithm: algorithm.BoundedLog, Limit: 20, Window: time.Second, Tolerance: 0.1, Holds: 4, HoldTTL: 300 * time.Millisecond, Counter: "c"},
		{Algorithm: algorithm.BoundedLog, Limit: 300, Window: time.Second, Holds: 4, HoldTTL: 300 * time.Millisecond, Counter: "c"},
	} {
		algs = append(algs, mustAlg(t, c))
	}
	rng := rand.New(rand.NewPCG(4, 4))
	ids := []lease.ID{lease.New(), lease.New(), lease.New()}
	seqs := make([]int64, len(ids))
	states := map[string][]int64{}
	under := map[string]int{} // the limit each key's Go state is of
	now, cur, switches := t0, 0, 0
	for i := range 1500 {
		now += int64(rng.IntN(40)) * int64(time.Millisecond)
		if rng.IntN(20) == 0 {
			cur = 1 - cur
		}
		a := algs[cur]
		limit := a.Config().Limit
		key := []string{"a", "b"}[rng.IntN(2)]
		st, ok := states[key]
		if !ok {
			st = make([]int64, a.Words())
			under[key] = cur
		}
		if under[key] != cur {
			dst := make([]int64, a.Words())
			if !a.(interface {
				ConvertFrom(algorithm.Algorithm, []int64, int64, []int64) bool
			}).ConvertFrom(algs[under[key]], st, now, dst) {
				t.Fatal("ConvertFrom refused")
			}
			st, under[key] = dst, cur
			switches++
		}
		states[key] = st
		if rng.IntN(3) == 0 {
			cost := 1 + rng.Int64N(limit/4+1)
			got, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: key, Cost: cost})
			if err != nil {
				t.Fatal(err)
			}
			x := slices.Clone(st)
			want := a.Decide(x, now, cost)
			if got != micros(want) {
				t.Fatalf("step %d decide under %d: redis %+v, go %+v", i, limit, got, micros(want))
			}
			if want.Allowed {
				copy(st, x) // a rejection writes nothing back (see TestHoldDifferential)
			}
			continue
		}
		j := rng.IntN(len(ids))
		seqs[j]++
		op := lease.Op{ID: ids[j], Seq: seqs[j], Spent: rng.Int64N(4), Target: rng.Int64N(limit/2 + 1)}
		cost := rng.Int64N(3)
		d, held, err := s.Hold(ctx, now, store.Request{Algorithm: a, Key: key, Cost: cost}, op)
		if err != nil {
			t.Fatal(err)
		}
		wd, wh := a.(store.HoldAlgorithm).Hold(st, now, cost, op)
		if d != micros(wd) || held != wh {
			t.Fatalf("step %d hold %+v under %d: redis %+v %+v, go %+v %+v", i, op, limit, d, held, micros(wd), wh)
		}
	}
	if switches < 20 {
		t.Fatalf("only %d conversions", switches)
	}
}
