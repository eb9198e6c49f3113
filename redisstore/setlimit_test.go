package redisstore_test

import (
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/store"
)

// allowedOf sends n requests for key and counts the allowed ones.
func allowedOf(t *testing.T, lim *floodgate.Limiter, key string, n int) int {
	t.Helper()
	got := 0
	for range n {
		d, err := lim.Allow(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			got++
		}
	}
	return got
}

// TestSetLimit is code ported from x/time/rate, where SetLimit changes the
// rate of a running limiter and keeps what was taken: in a store that keeps
// counts (store.CountKeeper) a lowered limit applies at once to the count
// so far and a raised one admits at once what it allows beyond it; in one
// that does not, the replaced limit also applies until its window is over.
// The promise holds across the change in both, for a fixed window and a
// bounded log.
func TestSetLimit(t *testing.T) {
	for _, alg := range []algorithm.Name{algorithm.FixedWindow, algorithm.BoundedLog} {
		for name, mk := range leaseStores(t) {
			t.Run(string(alg)+"/"+name, func(t *testing.T) { checkSetLimit(t, alg, mk(t)) })
		}
	}
}

// checkSetLimit runs TestSetLimit with algorithm alg on st.
func checkSetLimit(t *testing.T, alg algorithm.Name, st store.Store) {
	now, advance := fixedClock(time.Unix(1_764_000_000, 0))
	lim, err := floodgate.New(floodgate.Limit{Algorithm: alg, Limit: 10, Window: time.Second},
		floodgate.WithStore(st), floodgate.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := algorithm.New(lim.Limit())
	if err != nil {
		t.Fatal(err)
	}
	keeper, _ := st.(store.CountKeeper)
	keeps := keeper != nil && keeper.KeepsCounts(cur)
	if _, ok := st.(*redisstore.Store); ok && !keeps {
		t.Fatalf("the Redis store does not keep %s counts", alg)
	}
	if got := allowedOf(t, lim, "k", 6); got != 6 {
		t.Fatalf("before SetLimit: %d of 6 allowed", got)
	}
	if err := lim.SetLimit(floodgate.Limit{Algorithm: alg, Limit: 3, Window: time.Second}); err != nil {
		t.Fatal(err)
	}
	if got := lim.Limit().Limit; got != 3 {
		t.Fatalf("Limit().Limit = %d after SetLimit(3)", got)
	}
	// 6 are counted: a store that keeps the count rejects at once;
	// one that counts the new limit from zero passes 3 (both
	// limits allow them), not 3+10.
	want := 3
	if keeps {
		want = 0
	}
	if got := allowedOf(t, lim, "k", 10); got != want {
		t.Fatalf("right after lowering to 3: %d allowed, want %d", got, want)
	}
	advance(2 * time.Second) // the old limit's state has gone idle
	if got := allowedOf(t, lim, "k", 10); got != 3 {
		t.Fatalf("a window later: %d allowed, want the new limit 3", got)
	}
	// Raising with 3 counted: a store that keeps the count admits
	// the 17 beyond them at once; in another, the old limit (3)
	// still holds within its window.
	if err := lim.SetLimit(floodgate.Limit{Algorithm: alg, Limit: 20, Window: time.Second}); err != nil {
		t.Fatal(err)
	}
	want = 0
	if keeps {
		want = 17
	}
	if got := allowedOf(t, lim, "k", 30); got != want {
		t.Fatalf("right after raising to 20: %d allowed, want %d", got, want)
	}
	advance(2 * time.Second)
	if got := allowedOf(t, lim, "k", 30); got != 20 {
		t.Fatalf("a window after raising to 20: %d allowed, want 20", got)
	}
}

// TestReset is code ported from redis_rate, where Reset(key) gives a key
// its whole allowance back: the key passes again at once, other keys keep
// their counts, in both stores.
func TestReset(t *testing.T) {
	for name, mk := range leaseStores(t) {
		t.Run(name, func(t *testing.T) {
			now, _ := fixedClock(time.Unix(1_764_000_000, 0))
			lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.GCRA, Limit: 5, Window: time.Minute},
				floodgate.WithStore(mk(t)), floodgate.WithClock(now))
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"user", "other"} {
				if got := allowedOf(t, lim, k, 8); got != 5 {
					t.Fatalf("%s: %d of 8 allowed, want 5", k, got)
				}
			}
			if err := lim.Reset(ctx, "user"); err != nil {
				t.Fatal(err)
			}
			if got := allowedOf(t, lim, "user", 8); got != 5 {
				t.Fatalf("after Reset: %d of 8 allowed, want the whole 5", got)
			}
			if got := allowedOf(t, lim, "other", 1); got != 0 {
				t.Fatal("Reset of one key gave another key allowance")
			}
			if err := lim.Reset(ctx, "never-seen"); err != nil {
				t.Fatalf("Reset of a key never seen: %v", err)
			}
		})
	}
}
