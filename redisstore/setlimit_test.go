package redisstore_test

import (
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
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
// rate of a running limiter: a lowered limit applies at once (the count
// already taken still stands), a raised one once the old window has
// passed, and the promise holds across the change, in both stores.
func TestSetLimit(t *testing.T) {
	for name, mk := range leaseStores(t) {
		t.Run(name, func(t *testing.T) {
			now, advance := fixedClock(time.Unix(1_764_000_000, 0))
			lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.FixedWindow, Limit: 10, Window: time.Second},
				floodgate.WithStore(mk(t)), floodgate.WithClock(now))
			if err != nil {
				t.Fatal(err)
			}
			if got := allowedOf(t, lim, "k", 6); got != 6 {
				t.Fatalf("before SetLimit: %d of 6 allowed", got)
			}
			if err := lim.SetLimit(floodgate.Limit{Algorithm: algorithm.FixedWindow, Limit: 3, Window: time.Second}); err != nil {
				t.Fatal(err)
			}
			if got := lim.Limit().Limit; got != 3 {
				t.Fatalf("Limit().Limit = %d after SetLimit(3)", got)
			}
			// The new limit counts from zero, but 6 of the old 10 are
			// taken: 3 more pass (both allow), not 3+10.
			if got := allowedOf(t, lim, "k", 10); got != 3 {
				t.Fatalf("right after lowering to 3: %d allowed, want 3", got)
			}
			advance(2 * time.Second) // the old limit's state has gone idle
			if got := allowedOf(t, lim, "k", 10); got != 3 {
				t.Fatalf("a window later: %d allowed, want the new limit 3", got)
			}
			// Raising: within the old window the old limit (3) still holds;
			// after it, 20 per window.
			advance(time.Second)
			if err := lim.SetLimit(floodgate.Limit{Algorithm: algorithm.FixedWindow, Limit: 20, Window: time.Second}); err != nil {
				t.Fatal(err)
			}
			if got := allowedOf(t, lim, "k", 30); got != 3 {
				t.Fatalf("right after raising to 20: %d allowed, want 3 (the old limit's window is not over)", got)
			}
			advance(2 * time.Second)
			if got := allowedOf(t, lim, "k", 30); got != 20 {
				t.Fatalf("a window after raising to 20: %d allowed, want 20", got)
			}
		})
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
