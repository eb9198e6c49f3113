package algorithm

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// redisRate is an independent transcription of the formulas of
// go-redis/redis_rate's allow_n script (GCRA), in floating point, for
// checking gcra against. Its state is tat; times are in nanoseconds.
type redisRate struct {
	rate, period, burst float64
	tat                 float64
	seen                bool
}

// allowN returns allowed, remaining, retry_after and reset_after as the
// script computes them; remaining on a rejection is redis-cell's count of
// the units still available (the script itself returns 0).
func (r *redisRate) allowN(now, cost float64) (bool, int64, float64, float64) {
	emission := r.period / r.rate
	increment := emission * cost
	burstOffset := emission * r.burst
	tat := now
	if r.seen {
		tat = r.tat
	}
	tat = math.Max(tat, now)
	newTat := tat + increment
	allowAt := newTat - burstOffset
	diff := now - allowAt
	remaining := diff / emission
	if remaining < 0 {
		cell := math.Max(0, math.Floor((now-(tat-burstOffset))/emission))
		return false, int64(cell), -diff, tat - now
	}
	r.tat, r.seen = newTat, true
	return true, int64(math.Floor(remaining)), 0, newTat - now
}

func TestGCRAMatchesRedisRate(t *testing.T) {
	ms := float64(time.Millisecond)
	// 10 per second (T = 100 ms), burst 5.
	steps := []struct {
		at, cost       float64 // ms
		allowed        bool
		remaining      int64
		retry, resetMS float64
	}{
		{0, 1, true, 4, 0, 100},    // new_tat 100, allow_at -400, diff 400
		{0, 3, true, 1, 0, 400},    // new_tat 400, allow_at -100, diff 100
		{0, 2, false, 1, 100, 400}, // new_tat 600, allow_at 100, diff -100
		{50, 1, true, 0, 0, 450},   // new_tat 500, allow_at 0, diff 50
		{50, 1, false, 0, 50, 450}, // new_tat 600, allow_at 100, diff -50
		{2000, 5, true, 0, 0, 500}, // idle: tat = now, new_tat = now + 500
	}
	a := mustNew(t, Config{Algorithm: GCRA, Limit: 10, Window: time.Second, Burst: 5})
	ref := &redisRate{rate: 10, period: float64(time.Second), burst: 5}
	s := make([]int64, a.Words())
	base := 1000 * float64(time.Second) // exact in float64
	for i, st := range steps {
		now := base + st.at*ms
		d := a.Decide(s, int64(now), int64(st.cost))
		ok, rem, retry, reset := ref.allowN(now, st.cost)
		want := Decision{Allowed: st.allowed, Limit: 10, Remaining: st.remaining,
			RetryAfter: time.Duration(st.retry * ms), ResetAfter: time.Duration(st.resetMS * ms)}
		if !st.allowed {
			want.Reason = ReasonOverLimit
		}
		if d != want {
			t.Errorf("step %d: got %+v, want %+v", i, d, want)
		}
		if ok != st.allowed || rem != st.remaining || retry != st.retry*ms || reset != st.resetMS*ms {
			t.Errorf("step %d: the table disagrees with the formulas: %v %d %v %v", i, ok, rem, retry, reset)
		}
	}

	// Random traffic: every decision equals the formulas'.
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 11))
		limit := 1 + rng.Int64N(100)
		period := time.Duration(limit) * time.Duration(1+rng.Int64N(1000)) * time.Millisecond // divisible by limit
		burst := 1 + rng.Int64N(10)
		a := mustNew(t, Config{Algorithm: GCRA, Limit: limit, Window: period, Burst: burst})
		ref := &redisRate{rate: float64(limit), period: float64(period), burst: float64(burst)}
		s := make([]int64, a.Words())
		now := int64(1e9) // small enough that float64 is exact
		for range 500 {
			now += rng.Int64N(int64(period) / limit * 2)
			cost := 1 + rng.Int64N(burst)
			d := a.Decide(s, now, cost)
			ok, rem, retry, reset := ref.allowN(float64(now), float64(cost))
			if d.Allowed != ok || d.Remaining != rem || float64(d.RetryAfter) != retry || float64(d.ResetAfter) != reset {
				t.Fatalf("seed %d at %d cost %d: got %+v, formulas give allowed %v remaining %d retry %v reset %v",
					seed, now, cost, d, ok, rem, retry, reset)
			}
		}
	}
}
