package sim

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
)

// randomTraffic returns bursty traffic on one key over four windows: piles
// of random size at random milliseconds, with a stream mixed in.
func randomTraffic(r *rand.Rand, L int64, W time.Duration) []Request {
	var reqs []Request
	span := int64(4 * W / time.Millisecond)
	for range 1 + r.IntN(12) {
		at := r.Int64N(span)
		for range 1 + r.Int64N(L) {
			reqs = append(reqs, Request{At: time.Duration(at) * time.Millisecond, Key: "k", Cost: 1})
		}
	}
	step := 1 + r.Int64N(int64(W/time.Millisecond)/L*2+1)
	for at := r.Int64N(span); at < span; at += step {
		reqs = append(reqs, Request{At: time.Duration(at) * time.Millisecond, Key: "k", Cost: 1})
	}
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].At < reqs[j].At })
	return reqs
}

// compliantOnly keeps the requests of reqs that never put more than L in any
// W-long interval, dropping the rest.
func compliantOnly(reqs []Request, L int64, W time.Duration) []Request {
	var kept []Request
	j := 0
	for _, r := range reqs {
		for j < len(kept) && r.At-kept[j].At >= W {
			j++
		}
		if int64(len(kept)-j)+1 <= L {
			kept = append(kept, r)
		}
	}
	return kept
}

// TestPromisesOnRandomTraffic runs random bursty traffic, and the compliant
// part of it, through the real limiter for many seeds and checks each
// algorithm's documented bound on the busiest window, and that the exact
// algorithms never reject a compliant client.
func TestPromisesOnRandomTraffic(t *testing.T) {
	const L = 40
	W := time.Second
	type check struct {
		limit     floodgate.Limit
		bound     int64 // busiest window may not exceed this
		compliant bool  // a compliant client is never rejected (false: some are)
	}
	checks := []check{
		{floodgate.Limit{Algorithm: algorithm.SlidingLog}, L, true},
		{floodgate.Limit{Algorithm: algorithm.BoundedLog, Tolerance: 0.05}, L * 105 / 100, true},
		{floodgate.Limit{Algorithm: algorithm.BoundedLog, Tolerance: 0.1}, L * 110 / 100, true},
		{floodgate.Limit{Algorithm: algorithm.BoundedLog, Tolerance: 0.25}, L * 125 / 100, true},
		{floodgate.Limit{Algorithm: algorithm.FixedWindow}, 2 * L, true},
		{floodgate.Limit{Algorithm: algorithm.SlidingWindow, Slices: 8}, 2 * L, true},
		{floodgate.Limit{Algorithm: algorithm.TokenBucket, Capacity: 4}, L + 4, false},
	}
	seeds := 60
	if testing.Short() {
		seeds = 10
	}
	for _, c := range checks {
		c.limit.Limit, c.limit.Window = L, W
		worst, rejected := int64(0), 0
		for seed := range seeds {
			r := rand.New(rand.NewPCG(uint64(seed), 99))
			reqs := randomTraffic(r, L, W)
			outs, err := Run(ctx, c.limit, reqs)
			if err != nil {
				t.Fatal(err)
			}
			s := Summarize(reqs, outs, L, W)
			worst = max(worst, s.Busiest)
			if s.Busiest > c.bound {
				t.Errorf("%s %+v seed %d: busiest %d > bound %d", c.limit.Algorithm, c.limit, seed, s.Busiest, c.bound)
			}
			if c.compliant && s.FalseRejects != 0 {
				t.Errorf("%s seed %d: %d false rejects on bursty traffic", c.limit.Algorithm, seed, s.FalseRejects)
			}
			comp := compliantOnly(reqs, L, W)
			if sent := Busiest(Sent(comp), W); sent > L {
				t.Fatalf("compliantOnly kept %d in one window", sent)
			}
			outs, err = Run(ctx, c.limit, comp)
			if err != nil {
				t.Fatal(err)
			}
			s = Summarize(comp, outs, L, W)
			rejected += s.Rejected
			if c.compliant && s.Rejected != 0 {
				t.Errorf("%s seed %d: rejected %d requests of a compliant client", c.limit.Algorithm, seed, s.Rejected)
			}
		}
		if !c.compliant && rejected == 0 {
			t.Errorf("%s: no compliant request rejected over %d seeds; its small bucket should turn some away", c.limit.Algorithm, seeds)
		}
		t.Logf("%-15s bound %3d: worst busiest %3d over %d seeds; %d compliant requests rejected", c.limit.Algorithm, c.bound, worst, seeds, rejected)
	}
}
