package floodgate_test

import (
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

// TestSetLimitRefusesBadLimits: an invalid limit, or a change of a
// concurrency limit, is an error and changes nothing.
func TestSetLimitRefusesBadLimits(t *testing.T) {
	lim, err := floodgate.New(floodgate.Limit{Limit: 5, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]floodgate.Limit{
		"zero limit":  {Limit: 0, Window: time.Second},
		"no window":   {Limit: 5},
		"unknown":     {Algorithm: "no-such", Limit: 5, Window: time.Second},
		"concurrency": {Algorithm: algorithm.Concurrency, Limit: 5, Window: time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			if err := lim.SetLimit(l); err == nil {
				t.Fatalf("SetLimit(%+v) succeeded", l)
			}
			if got := lim.Limit().Limit; got != 5 {
				t.Fatalf("a refused SetLimit changed the limit to %d", got)
			}
		})
	}
}

// onlyStore hides every method of a store but store.Store's.
type onlyStore struct{ store.Store }

// TestResetUnsupported: a store that cannot forget a key says so.
func TestResetUnsupported(t *testing.T) {
	lim, err := floodgate.New(floodgate.Limit{Limit: 5, Window: time.Second}, floodgate.WithStore(onlyStore{memstore.New(memstore.Options{})}))
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.Reset(ctx, "k"); err != floodgate.ErrResetUnsupported {
		t.Fatalf("Reset = %v, want ErrResetUnsupported", err)
	}
}

// TestSetLimitKeepsCount: 10 per second raised to 1000 per second 50 ms
// after 10 requests admits at once the 990 the new limit allows beyond
// them, and lowered back it rejects at once; for every algorithm whose
// state converts.
func TestSetLimitKeepsCount(t *testing.T) {
	for _, name := range []algorithm.Name{algorithm.BoundedLog, algorithm.FixedWindow, algorithm.GCRA, algorithm.TokenBucket,
		algorithm.WeightedWindow, algorithm.SlidingWindow} {
		t.Run(string(name), func(t *testing.T) {
			now := time.Unix(1_000_000, 0)
			lim, err := floodgate.New(floodgate.Limit{Algorithm: name, Limit: 10, Window: time.Second},
				floodgate.WithClock(func() time.Time { return now }))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				if d, _ := lim.Allow(ctx, "k"); !d.Allowed {
					t.Fatalf("request %d rejected under 10/s", i)
				}
				now = now.Add(time.Millisecond)
			}
			if err := lim.SetLimit(floodgate.Limit{Algorithm: name, Limit: 1000, Window: time.Second}); err != nil {
				t.Fatal(err)
			}
			now = now.Add(40 * time.Millisecond)
			admitted := 0
			for admitted < 2000 {
				if d, _ := lim.Allow(ctx, "k"); !d.Allowed {
					break
				}
				admitted++
			}
			if admitted != 990 {
				t.Fatalf("after raising 10/s to 1000/s, %d admitted at once, want 990", admitted)
			}
			if err := lim.SetLimit(floodgate.Limit{Algorithm: name, Limit: 10, Window: time.Second}); err != nil {
				t.Fatal(err)
			}
			if d, _ := lim.Allow(ctx, "k"); d.Allowed {
				t.Fatalf("lowered to 10/s with 1000 counted, a request was allowed: %+v", d)
			}
		})
	}
}

// TestSetLimitOtherStores: a store that keeps counts per limit (no
// store.CountKeeper) is given the replaced limit too, so a lowered limit
// still applies at once to the count so far.
func TestSetLimitOtherStores(t *testing.T) {
	lim, err := floodgate.New(floodgate.Limit{Limit: 100, Window: time.Hour}, floodgate.WithStore(onlyStore{memstore.New(memstore.Options{})}))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		lim.Allow(ctx, "k")
	}
	if err := lim.SetLimit(floodgate.Limit{Limit: 10, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.Allow(ctx, "k"); d.Allowed {
		t.Fatalf("lowered to 10 with 20 counted: %+v", d)
	}
}
