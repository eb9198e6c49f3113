package floodgate_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
)

// virtualClock is a clock the test moves by hand.
type virtualClock struct{ t time.Time }

func (c *virtualClock) now() time.Time { return c.t }

func TestChargeCountsPastTheLimitAndDebtRejects(t *testing.T) {
	clk := &virtualClock{t: time.Unix(1000, 0)}
	lim, err := floodgate.New(floodgate.Limit{Limit: 10_000, Window: time.Minute}, floodgate.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The sequence of the issue: check, charge 8000, check, charge 8000.
	d, err := lim.Check(ctx, "k")
	if err != nil || !d.Allowed || d.Remaining != 10_000 {
		t.Fatalf("first check: %+v %v, want allowed with 10000 remaining (a check counts nothing)", d, err)
	}
	if d, _ = lim.Charge(ctx, "k", 8000); d.Remaining != 2000 || !d.Allowed {
		t.Fatalf("after charging 8000: %+v, want 2000 remaining", d)
	}
	if d, _ = lim.Check(ctx, "k"); !d.Allowed {
		t.Fatalf("check with 2000 left: %+v, want allowed", d)
	}
	clk.t = clk.t.Add(10 * time.Second)
	if d, _ = lim.Charge(ctx, "k", 8000); d.Allowed || d.Remaining != 0 {
		t.Fatalf("after charging 16000 of 10000: %+v, want a key in debt", d)
	}
	if d, _ = lim.Check(ctx, "k"); d.Allowed {
		t.Fatalf("check while in debt: %+v, want rejected", d)
	}
	// The first 8000 leave the window 60s after they were charged; the
	// second 8000 are still under the limit then, so the debt is gone.
	if d.RetryAfter <= 0 || d.RetryAfter > 50*time.Second+time.Second {
		t.Fatalf("RetryAfter %v, want about 50s (until the first charge leaves the window)", d.RetryAfter)
	}
	clk.t = clk.t.Add(d.RetryAfter)
	if d, _ = lim.Check(ctx, "k"); !d.Allowed {
		t.Fatalf("check after the debt left the window: %+v, want allowed", d)
	}
	// Charges and ordinary requests share the counter.
	if d, _ = lim.AllowN(ctx, "k", 3000); d.Allowed {
		t.Fatalf("AllowN(3000) with 2000 left: %+v, want rejected", d)
	}
}

func TestPrepaymentSettlesOnce(t *testing.T) {
	clk := &virtualClock{t: time.Unix(1000, 0)}
	lim, _ := floodgate.New(floodgate.Limit{Limit: 1000, Window: time.Minute}, floodgate.WithClock(clk.now))
	ctx := context.Background()
	r, err := lim.Prepay(ctx, "k", 300)
	if err != nil || !r.Decision.Allowed || r.Decision.Remaining != 700 {
		t.Fatalf("Prepay(300): %+v %v", r, err)
	}
	d, err := r.Settle(ctx, 500) // 200 more than the estimate
	if err != nil || d.Remaining != 500 {
		t.Fatalf("Settle(500): %+v %v, want 500 remaining", d, err)
	}
	if _, err := r.Settle(ctx, 500); !errors.Is(err, floodgate.ErrSettled) {
		t.Fatalf("second Settle: %v, want ErrSettled", err)
	}
	r2, _ := lim.Prepay(ctx, "k", 100)
	if d, _ := r2.Settle(ctx, 40); d.Remaining != 400 {
		t.Fatalf("settling under the estimate: %+v, want the estimate kept (400 remaining)", d)
	}
	if _, err := lim.Prepay(ctx, "k", -1); err == nil {
		t.Fatal("negative estimate accepted")
	}
}

// TestLateCostBound is the property the late-charge promise states: with
// checks before and charges after, the units counted in any window-long
// interval stay within (1+e)·L plus the cost of the responses in flight (at
// most one per client), and a check is never allowed while the key is over
// its limit.
func TestLateCostBound(t *testing.T) {
	over := 0
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		limit := int64(1000 + rng.IntN(100_000))
		maxCost := 1 + rng.Int64N(limit/4)
		clients := 1 + rng.IntN(20)
		if checkLateCost(t, seed, limit, maxCost, clients, rng) > limit {
			over++
		}
	}
	// The bound is only tested if charges do take keys past their limits.
	if over < 10 {
		t.Errorf("only %d of 20 runs overspent; the test does not exercise debt", over)
	}
}

type charged struct{ at, cost int64 }

func checkLateCost(t *testing.T, seed uint64, limit, maxCost int64, clients int, rng *rand.Rand) int64 {
	t.Helper()
	window := time.Minute
	clk := &virtualClock{t: time.Unix(0, 0)}
	lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.BoundedLog, Limit: limit, Window: window},
		floodgate.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	tol := lim.Limit().Tolerance
	ctx := context.Background()
	type inflight struct {
		done time.Time
		cost int64
	}
	busy := make([]*inflight, clients)
	var log []charged
	end := clk.t.Add(6 * window)
	for clk.t.Before(end) {
		for i := range busy {
			if f := busy[i]; f != nil && !clk.t.Before(f.done) {
				if _, err := lim.Charge(ctx, "tenant", f.cost); err != nil {
					t.Fatal(err)
				}
				log = append(log, charged{clk.t.UnixNano(), f.cost})
				busy[i] = nil
			}
			if busy[i] == nil {
				d, err := lim.Check(ctx, "tenant")
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					busy[i] = &inflight{clk.t.Add(time.Duration(rng.Int64N(int64(5 * time.Second)))), 1 + rng.Int64N(maxCost)}
				}
			}
		}
		clk.t = clk.t.Add(time.Duration(1 + rng.Int64N(int64(400*time.Millisecond))))
	}
	bound := int64((1+tol)*float64(limit)) + int64(clients)*maxCost
	got := busiest(log, int64(window))
	if got > bound {
		t.Errorf("seed %d (L=%d, max cost %d, %d clients): busiest window counted %d, bound %d",
			seed, limit, maxCost, clients, got, bound)
	}
	return got
}

// busiest returns the most units charged in any window-long interval.
func busiest(log []charged, window int64) int64 {
	var best, sum int64
	j := 0
	for i := range log {
		sum += log[i].cost
		for log[j].at <= log[i].at-window {
			sum -= log[j].cost
			j++
		}
		best = max(best, sum)
	}
	return best
}
