package floodgate_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

var ctx = context.Background()

// fixedClock returns a clock frozen at t and a function that moves it.
func fixedClock(t time.Time) (func() time.Time, func(time.Duration)) {
	var mu sync.Mutex
	return func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return t
		}, func(d time.Duration) {
			mu.Lock()
			t = t.Add(d)
			mu.Unlock()
		}
}

func TestNewRejectsBadLimits(t *testing.T) {
	for _, tc := range []struct {
		limit floodgate.Limit
		want  string
	}{
		{floodgate.Limit{Limit: 0, Window: time.Second}, "limit must be at least 1"},
		{floodgate.Limit{Limit: 5}, "window must be positive"},
		{floodgate.Limit{Algorithm: "leaky", Limit: 5, Window: time.Second}, "unknown algorithm"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			lim, err := floodgate.New(tc.limit)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New(%+v) = %v, %v; want an error containing %q", tc.limit, lim, err, tc.want)
			}
		})
	}
}

func TestLimitFillsDefaults(t *testing.T) {
	lim, err := floodgate.New(floodgate.Limit{Limit: 600, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := lim.Limit()
	if got.Algorithm != algorithm.BoundedLog || got.Limit != 600 || got.Window != time.Minute || got.Tolerance != 0.05 {
		t.Fatalf("Limit() = %+v, want bounded-log, 600 per minute, tolerance 0.05", got)
	}
}

func TestAllowCountsPerKeyAndCost(t *testing.T) {
	clock, advance := fixedClock(time.Unix(1000, 0))
	lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Second},
		floodgate.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.AllowN(ctx, "a", 4); !d.Allowed || d.Remaining != 1 || d.Limit != 5 {
		t.Fatalf("AllowN 4 of 5: %+v", d)
	}
	if d, _ := lim.AllowN(ctx, "a", 2); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("AllowN 2 with 1 left: %+v, want rejected, retry after 1s", d)
	}
	if d, _ := lim.Allow(ctx, "b"); !d.Allowed || d.Remaining != 4 {
		t.Fatalf("another key: %+v", d)
	}
	if d, _ := lim.AllowN(ctx, "c", 6); d.Allowed || d.Reason != algorithm.ReasonCostOverLimit {
		t.Fatalf("cost over the limit: %+v", d)
	}
	if d, _ := lim.AllowN(ctx, "c", 0); d.Allowed || d.Reason != algorithm.ReasonBadCost {
		t.Fatalf("cost 0: %+v", d)
	}
	advance(time.Second)
	if d, _ := lim.AllowN(ctx, "a", 5); !d.Allowed {
		t.Fatalf("next window: %+v", d)
	}
}

// TestAllowExactUnderConcurrency runs many goroutines against one key with a
// frozen clock: exactly Limit requests may pass.
func TestAllowExactUnderConcurrency(t *testing.T) {
	clock, _ := fixedClock(time.Unix(5000, 0))
	for _, name := range []algorithm.Name{algorithm.FixedWindow, algorithm.SlidingWindow, algorithm.TokenBucket,
		algorithm.BoundedLog, algorithm.WeightedWindow, algorithm.SlidingLog} {
		lim, err := floodgate.New(floodgate.Limit{Algorithm: name, Limit: 100, Window: time.Minute}, floodgate.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					if d, err := lim.Allow(ctx, "shared"); err == nil && d.Allowed {
						allowed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if got := allowed.Load(); got != 100 {
			t.Errorf("%s: %d of 400 concurrent requests allowed, want exactly the limit 100", name, got)
		}
	}
}

func TestAllowAllocatesNothingForKnownKey(t *testing.T) {
	for _, name := range []algorithm.Name{algorithm.FixedWindow, algorithm.TokenBucket, algorithm.GCRA, algorithm.BoundedLog,
		algorithm.SlidingWindow} {
		lim, err := floodgate.New(floodgate.Limit{Algorithm: name, Limit: algorithm.MaxLimit, Window: time.Hour,
			Burst: 1000})
		if err != nil {
			t.Fatal(err)
		}
		lim.Allow(ctx, "known")
		if n := testing.AllocsPerRun(200, func() { lim.Allow(ctx, "known") }); n != 0 {
			t.Errorf("%s: Allow on a known key allocates %v times", name, n)
		}
	}
}

func TestWaitSleepsForTheDelay(t *testing.T) {
	// The limiter's clock stands still, so however slowly the machine runs
	// the three requests arrive at one instant; Wait sleeps in real time.
	clock, _ := fixedClock(time.Unix(1000, 0))
	lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.LeakyBucket, Limit: 20, Window: time.Second},
		floodgate.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var last floodgate.Decision
	for range 3 {
		if last, err = lim.Wait(ctx, "w", 1); err != nil || !last.Allowed {
			t.Fatalf("Wait: %+v, %v", last, err)
		}
	}
	// Three requests at 20/s at one instant: the third is let through
	// 100ms after the first. Wait must not return before its delay has
	// passed.
	if last.Delay <= 0 {
		t.Fatalf("third request has no delay: %+v", last)
	}
	if elapsed := time.Since(start); elapsed < last.Delay {
		t.Fatalf("Wait returned after %v, before the delay %v", elapsed, last.Delay)
	}
}

func TestWaitStopsWithContext(t *testing.T) {
	clock, _ := fixedClock(time.Unix(1000, 0))
	lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.LeakyBucket, Limit: 1, Window: time.Hour},
		floodgate.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	lim.Allow(ctx, "w") // the next request must wait an hour
	c, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	d, err := lim.Wait(c, "w", 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a 20ms context for a 1h delay: %+v, %v; want DeadlineExceeded", d, err)
	}
	if !d.Allowed || d.Delay < 59*time.Minute {
		t.Fatalf("decision %+v, want allowed with a delay of about an hour", d)
	}
}

func TestThrottleReturnsRejectionAtOnce(t *testing.T) {
	clock, _ := fixedClock(time.Unix(1000, 0))
	lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.FixedWindow, Limit: 1, Window: time.Hour},
		floodgate.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	lim.Allow(ctx, "w")
	d, err := lim.Throttle(ctx, "w", 1)
	if err != nil || d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("Throttle over the limit: %+v, %v; want an immediate rejection with RetryAfter", d, err)
	}
}

// TestWaitAsInXTimeRate is code ported from x/time/rate: a loop that calls
// Wait before each unit of work must be held to the limit, not let through
// with a rejection it does not look at. Five calls at two a second take
// two seconds (on synctest's clock).
func TestWaitAsInXTimeRate(t *testing.T) {
	for _, alg := range []algorithm.Name{algorithm.FixedWindow, algorithm.GCRA, algorithm.TokenBucket, algorithm.BoundedLog, algorithm.LeakyBucket} {
		t.Run(string(alg), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim, err := floodgate.New(floodgate.Limit{Algorithm: alg, Limit: 2, Window: time.Second, Burst: 1, Capacity: 1})
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				for i := range 5 {
					d, err := lim.Wait(context.Background(), "worker", 1)
					if err != nil || !d.Allowed {
						t.Fatalf("call %d: %+v, %v", i, d, err)
					}
				}
				if took := time.Since(start); took < 2*time.Second {
					t.Fatalf("five Waits at 2/s took %v, want at least 2s", took)
				}
			})
		})
	}
}

func TestWaitKnowsItWouldPassTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.FixedWindow, Limit: 1, Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		lim.Allow(context.Background(), "w")
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		d, err := lim.Wait(c, "w", 1)
		if !errors.Is(err, context.DeadlineExceeded) || d.Allowed {
			t.Fatalf("Wait for an hour with a minute's deadline: %+v, %v", d, err)
		}
		if time.Since(start) != 0 {
			t.Fatalf("Wait slept %v before saying it could not make the deadline", time.Since(start))
		}
	})
}

func TestWaitNeverAllowed(t *testing.T) {
	lim, err := floodgate.New(floodgate.Limit{Limit: 10, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d, err := lim.Wait(ctx, "w", 11)
	if err == nil || d.Allowed || d.Reason != algorithm.ReasonCostOverLimit {
		t.Fatalf("Wait for a cost above the limit: %+v, %v", d, err)
	}
}

// failing is a store that cannot decide, as a Redis store cannot while Redis
// is down; the limiter must pass its error on rather than decide itself.
type failing struct{ store.Store }

var errDown = errors.New("store down")

func (failing) DecideOne(context.Context, int64, store.Request) (algorithm.Decision, error) {
	return algorithm.Decision{}, errDown
}

func (failing) Release(context.Context, int64, []store.Request) error { return errDown }

func TestStoreErrorsReachTheCaller(t *testing.T) {
	lim, err := floodgate.New(floodgate.Limit{Limit: 1, Window: time.Second}, floodgate.WithStore(failing{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Allow(ctx, "k"); !errors.Is(err, errDown) {
		t.Fatalf("Allow: err = %v, want the store's error", err)
	}
	if _, err := lim.Wait(ctx, "k", 1); !errors.Is(err, errDown) {
		t.Fatalf("Wait: err = %v, want the store's error", err)
	}
	if _, err := lim.Acquire(ctx, "k", 1); !errors.Is(err, errDown) {
		t.Fatalf("Acquire: err = %v, want the store's error", err)
	}
}

// recording wraps a memory store and keeps the times it is asked to decide
// at, to check that WithClock's clock is the one used.
type recording struct {
	*memstore.Store
	times []int64
}

func (r *recording) DecideOne(c context.Context, now int64, req store.Request) (algorithm.Decision, error) {
	r.times = append(r.times, now)
	return r.Store.DecideOne(c, now, req)
}

func TestWithClockAndWithStore(t *testing.T) {
	clock, advance := fixedClock(time.Unix(42, 7))
	rec := &recording{Store: memstore.New(memstore.Options{})}
	lim, err := floodgate.New(floodgate.Limit{Limit: 10, Window: time.Second},
		floodgate.WithStore(rec), floodgate.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	lim.Allow(ctx, "k")
	advance(time.Millisecond)
	lim.Allow(ctx, "k")
	want := []int64{time.Unix(42, 7).UnixNano(), time.Unix(42, 7).Add(time.Millisecond).UnixNano()}
	if len(rec.times) != 2 || rec.times[0] != want[0] || rec.times[1] != want[1] {
		t.Fatalf("store asked at %v, want %v", rec.times, want)
	}
	if rec.Len() != 1 {
		t.Fatalf("given store holds %d keys, want 1", rec.Len())
	}
	// Nil options mean the defaults.
	lim, err = floodgate.New(floodgate.Limit{Limit: 1, Window: time.Second}, floodgate.WithStore(nil), floodgate.WithClock(nil))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
		t.Fatalf("limiter with nil options: %+v, %v", d, err)
	}
}
