package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/algorithm/gubernator"
	"github.com/floodgate-dev/floodgate/store"
)

// gubRequest draws one gubernator request at now (ns) with the bounds
// gubernator's front end enforces: both buckets, limits, durations and
// bursts that change between requests of one key, every behaviour flag
// (calendar periods of every duration number, invalid ones included),
// created_at absent, equal to now or skewed either way. Extreme requests
// use the bounds' ends: rates far below one per millisecond, bursts far
// above the limit, created_at years apart. As v2.21.0 (V221), half of
// the leaky bucket requests carry a max_wait (with the behaviours and hits
// gubernator accepts with it) and a wait ceiling.
func gubRequest(rng *rand.Rand, now int64, extreme bool, v gubernator.Version) (gubernator.Params, int64) {
	pick := func(v ...int64) int64 { return v[rng.IntN(len(v))] }
	p := gubernator.Params{Version: v}
	if rng.IntN(5) == 0 && (v == gubernator.V221 || rng.IntN(2) == 0) {
		return gubFlow(rng, now, v)
	}
	p.Leaky = rng.IntN(2) == 0
	p.Limit = pick(0, 1, 2, 3, 5, 10, 100)
	p.Duration = pick(0, 1, 7, 100, 1000, 5000, 60000)
	p.Burst = pick(0, 0, 0, 1, 4, 20)
	if extreme {
		p.Limit = pick(1, 2, algorithm.MaxLimit, algorithm.MaxLimit-1, 1<<31)
		p.Duration = pick(1, 2, gubernator.MaxDuration, 3_600_000)
		p.Burst = pick(0, 1, algorithm.MaxLimit)
	}
	if p.Leaky {
		p.Limit, p.Duration = max(p.Limit, 1), max(p.Duration, 1)
	} else {
		p.Burst = 0
	}
	for _, f := range []int64{1, 2, gubernator.Gregorian, gubernator.ResetRemaining, 16, gubernator.DrainOverLimit, 64} {
		odds := 6
		if f == gubernator.Gregorian {
			odds = 12
		}
		if rng.IntN(odds) == 0 {
			p.Behavior |= f
		}
	}
	nowMS := now / 1e6
	switch r := rng.IntN(10); {
	case r < 5: // absent: the decision's time
	case r < 7:
		p.CreatedAt = nowMS
	case r < 9:
		p.CreatedAt = max(1, nowMS+rng.Int64N(20_001)-10_000)
	default:
		p.CreatedAt = max(1, nowMS+rng.Int64N(2_000_001)-1_000_000)
	}
	if extreme && rng.IntN(4) == 0 {
		p.CreatedAt = pick(1, gubernator.MaxCreatedAt, nowMS+(1<<31))
	}
	if p.Behavior&gubernator.Gregorian != 0 {
		p.Duration = rng.Int64N(7) // 3 (weeks) and 6 name no period
		p.Period = gubernator.PeriodAt(time.Unix(0, now).UTC(), p.Duration, v)
	}
	hits := pick(0, 1, 1, 1, 2, 3, -1, p.Limit, p.Limit+1, p.Limit*2)
	if extreme && rng.IntN(5) == 0 {
		hits = pick(algorithm.MaxLimit, -algorithm.MaxLimit)
	}
	if v == gubernator.V221 && p.Leaky && rng.IntN(2) == 0 {
		p.MaxWait = pick(1, 100, 1000, 6000, 60_000, 600_000)
		p.WaitCeiling = pick(300_000, 300_000, 1000, 0)
		const global = 2
		p.Behavior &^= global | gubernator.Gregorian | gubernator.ResetRemaining | gubernator.DrainOverLimit
		hits = max(hits, 0)
		if rng.IntN(3) > 0 {
			hits = pick(1, 1, 2, 3, p.Limit, p.Burst+1)
		}
	}
	return p, hits
}

// gubFlow draws a request of a steady flow on a key of its own (marked by
// gubFlowDuration): as v2.21.0 half are leaky bucket requests that book
// ahead into debt with max_wait, or plain ones meeting the debt; the others
// are token bucket requests around an empty bucket, whose stored status
// and limit changes matter.
func gubFlow(rng *rand.Rand, now int64, v gubernator.Version) (gubernator.Params, int64) {
	pick := func(v ...int64) int64 { return v[rng.IntN(len(v))] }
	p := gubernator.Params{Version: v, Duration: gubFlowDuration}
	if rng.IntN(3) == 0 {
		p.CreatedAt = now/1e6 + pick(-5000, 5000, 0)
	}
	if v == gubernator.V213 || rng.IntN(2) == 0 {
		p.Limit = pick(3, 3, 3, 5, 1)
		p.Behavior = pick(0, 0, 0, gubernator.DrainOverLimit, gubernator.ResetRemaining)
		return p, pick(0, 0, 1, 1, 2, -1)
	}
	p.Leaky, p.Limit, p.Burst = true, 10, pick(0, 3, 10)
	p.MaxWait, p.WaitCeiling = pick(0, 6000, 60_000, 120_000, 600_000), 300_000
	if p.MaxWait > 0 {
		return p, pick(0, 1, 1, 2, 4, 11)
	}
	p.Behavior = pick(0, 0, gubernator.DrainOverLimit, gubernator.ResetRemaining)
	return p, pick(0, 1, 3, -2)
}

// gubFlowDuration marks the requests of gubRequest's steady flows, which
// gubDiff sends to a key of their own.
const gubFlowDuration = 60_001

// gubRef holds the Go algorithm's state per key: what Redis must hold.
type gubRef map[string][]int64

func (r gubRef) state(key string) []int64 {
	if r[key] == nil {
		r[key] = make([]int64, 7)
	}
	return r[key]
}

// TestGubernatorDifferential runs random sequences of gubernator requests
// through the Go algorithm on local states and through Redis's script
// (alone, in calls of several requests naming keys more than once, and in
// merges of forwarded hits), on one server and on a Cluster, and requires
// every decision and every state to be equal, field by field.
func TestGubernatorDifferential(t *testing.T) {
	stores := []struct {
		name string
		new  func(t *testing.T) *Store
	}{
		{"single", func(t *testing.T) *Store { return newStore(t, Options{ClientTime: true}) }},
		{"cluster", newClusterStore},
	}
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := st.new(t)
			var c [6]int
			for seed := range seeds {
				// Seeds 0-2 as v2.21.0, 3-5 as v2.13.0, and so on; every
				// third extreme.
				extreme, v := seed%3 == 2, gubernator.V221
				if seed/3%2 == 1 {
					v = gubernator.V213
				}
				for i, k := range gubDiff(t, s, uint64(seed), extreme, v) {
					c[i] += k
				}
			}
			t.Logf("%d decisions equal: %d over the limit, %d with a period gubernator cannot compute, %d with a saturated or overflowed answer, %d scheduled, %d never fitting",
				c[0], c[1], c[2], c[3], c[4], c[5])
			for i, what := range []string{"over the limit", "bad periods", "saturated", "scheduled", "never fitting"} {
				if c[i+1] == 0 {
					t.Errorf("the sequences missed a case: no %s", what)
				}
			}
		})
	}
}

// gubDiff runs one seed's sequence and returns how many decisions it
// compared, how many were over the limit, had a bad period, and had a
// saturated reset or an overflowed remaining.
func gubDiff(t *testing.T, s *Store, seed uint64, extreme bool, v gubernator.Version) [6]int {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 35))
	keys := []string{"a_b", "a_b", "c", "name_unique key \xff", "leaky flow", "token flow"}
	keyFor := func(p gubernator.Params) string {
		switch {
		case p.Duration == gubFlowDuration && p.Leaky:
			return keys[4]
		case p.Duration == gubFlowDuration:
			return keys[5]
		}
		return keys[rng.IntN(4)]
	}
	for i := range keys {
		keys[i] = fmt.Sprint(seed, extreme, v, keys[i]) // no state of an earlier seed
	}
	ref := gubRef{}
	now := t0 + int64(seed)*int64(time.Hour)
	var counts [6]int
	check := func(step int, what string, p gubernator.Params, hits int64, got, want algorithm.Decision) {
		t.Helper()
		counts[0]++
		if want.Reason == algorithm.ReasonOverLimit {
			counts[1]++
		}
		if want.Reason == gubernator.ReasonBadPeriod {
			counts[2]++
		}
		if want.Remaining == math.MinInt64 || want.ResetAfter.Abs() >= time.Duration(1<<43)*time.Millisecond {
			counts[3]++
		}
		switch want.Reason {
		case gubernator.ReasonScheduled:
			counts[4]++
		case gubernator.ReasonNeverFits:
			counts[5]++
		}
		if got != want {
			t.Fatalf("seed %d step %d (%s) at %d ms, %+v hits %d:\nredis %+v\ngo    %+v", seed, step, what, now/1e6, p, hits, got, want)
		}
	}
	for step := range 400 {
		switch r := rng.IntN(20); {
		case r == 0:
			now -= rng.Int64N(2000) * 1e6 // a clock behind
		case r < 3:
			now += rng.Int64N(4_000_000) * 1e6 // past many expiries
		default:
			now += rng.Int64N(300) * 1e6
		}
		switch r := rng.IntN(10); {
		case r < 5: // one request alone
			p, hits := gubRequest(rng, now, extreme, v)
			key := keyFor(p)
			a := gubernator.New(p)
			want := a.Decide(ref.state(key), now, hits)
			got, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: key, Cost: hits})
			if err != nil {
				t.Fatalf("seed %d step %d: DecideOne: %v", seed, step, err)
			}
			check(step, "alone", p, hits, got, want)
			gubSameState(t, s, key, ref.state(key), fmt.Sprintf("seed %d step %d, after %+v hits %d", seed, step, p, hits))
		case r < 8: // one call of several, keys repeated
			n := 1 + rng.IntN(5)
			reqs := make([]store.Request, n)
			want := make([]algorithm.Decision, n)
			params := make([]gubernator.Params, n)
			for i := range reqs {
				p, hits := gubRequest(rng, now, extreme, v)
				a := gubernator.New(p)
				reqs[i] = store.Request{Algorithm: a, Key: keyFor(p), Cost: hits}
				want[i] = a.Decide(ref.state(reqs[i].Key), now, hits)
				params[i] = p
			}
			got := make([]algorithm.Decision, n)
			if err := s.Decide(ctx, now, reqs, got); err != nil {
				t.Fatalf("seed %d step %d: Decide: %v", seed, step, err)
			}
			for i := range reqs {
				check(step, fmt.Sprintf("call of %d, #%d", n, i), params[i], reqs[i].Cost, got[i], want[i])
			}
		default: // hits forwarded by GLOBAL peers, merged
			p, _ := gubRequest(rng, now, extreme, v)
			a := gubernator.New(p)
			key := keyFor(p)
			var evs []store.Event
			for range rng.IntN(4) {
				evs = append(evs, store.Event{Time: now - rng.Int64N(5000)*1e6, Cost: rng.Int64N(4)})
			}
			for _, e := range evs {
				a.Record(ref.state(key), e.Time, e.Cost)
			}
			b := []store.SyncBatch{{Algorithm: a, Key: key, Events: evs}}
			if err := s.Sync(ctx, now, b); err != nil {
				t.Fatalf("seed %d step %d: Sync: %v", seed, step, err)
			}
			if !slices.Equal(b[0].State, ref.state(key)) {
				t.Fatalf("seed %d step %d: state of %q after merging %v with %+v:\nredis %v\ngo    %v", seed, step, key, evs, p, b[0].State, ref.state(key))
			}
		}
		if step%10 == 0 {
			for _, key := range keys {
				gubSameState(t, s, key, ref.state(key), fmt.Sprintf("seed %d step %d", seed, step))
			}
		}
	}
	return counts
}

// gubSameState requires the state Redis holds for key to be want.
func gubSameState(t *testing.T, s *Store, key string, want []int64, where string) {
	t.Helper()
	b := []store.SyncBatch{{Algorithm: gubernator.New(gubernator.Params{}), Key: key}}
	if err := s.Sync(context.Background(), t0, b); err != nil {
		t.Fatalf("%s: reading %q: %v", where, key, err)
	}
	if !slices.Equal(b[0].State, want) {
		t.Fatalf("%s: state of %q:\nredis %v\ngo    %v", where, key, b[0].State, want)
	}
}

// TestGubernatorOverflow decides the requests whose arithmetic leaves
// int64 in Go: a leaky bucket leaking more than 2^63 units (its remaining
// becomes the most negative int64 as gubernator's int64(float) makes it on
// amd64), a reset offset beyond 2^43 ms (saturated), a rate below one per
// millisecond. Redis must answer as the Go algorithm does.
func TestGubernatorOverflow(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	const lim = algorithm.MaxLimit
	// created_at is the decisions' time: the states do not expire.
	ms := t0 / 1e6
	leaky := gubernator.Params{Leaky: true, Limit: lim, Duration: 1, Burst: lim, CreatedAt: ms, Version: gubernator.V213}
	later := leaky
	later.CreatedAt += 2147483648 // leaks just under 2^63 units: with the burst, over
	slow := gubernator.Params{Leaky: true, Limit: 1, Duration: gubernator.MaxDuration, Burst: lim, CreatedAt: ms, Version: gubernator.V213}
	month := gubernator.Params{Leaky: true, Limit: 3, Duration: 4, Behavior: gubernator.Gregorian, CreatedAt: ms,
		Period: gubernator.PeriodAt(time.UnixMilli(ms).UTC(), 4, gubernator.V213), Version: gubernator.V213}
	// As v2.21.0: a booking whose wait saturates, and a debt far ahead.
	booked := gubernator.Params{Leaky: true, Limit: 1, Duration: gubernator.MaxDuration, Burst: lim, CreatedAt: ms,
		MaxWait: 1 << 62, WaitCeiling: 1 << 62}
	steps := []struct {
		p    gubernator.Params
		hits int64
	}{
		{leaky, 1}, {later, 5}, {later, -lim}, {later, 0}, {leaky, lim},
		{slow, lim}, {slow, 1}, {slow, -1},
		{month, 1}, {month, 2}, {month, 5},
		{booked, lim}, {booked, lim}, {booked, lim}, {booked, 0},
	}
	ref := gubRef{}
	now := t0
	sawMin := false
	for i, st := range steps {
		key := fmt.Sprintf("k%d", i/5)
		if st.p.MaxWait > 0 {
			key = "booked"
		}
		a := gubernator.New(st.p)
		want := a.Decide(ref.state(key), now, st.hits)
		sawMin = sawMin || want.Remaining == math.MinInt64
		got, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: key, Cost: st.hits})
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("step %d %+v hits %d:\nredis %+v\ngo    %+v", i, st.p, st.hits, got, want)
		}
		gubSameState(t, s, key, ref.state(key), fmt.Sprintf("step %d", i))
	}
	if !sawMin {
		t.Error("no step overflowed the remaining: the case is not covered")
	}
}

// TestGubernatorExpiry checks that a gubernator key lives in Redis as long
// as its state (gubernator's expiry, from the request's duration) plus the
// store's slack, not a fixed idle time, and that a state past its expiry
// is not read back.
func TestGubernatorExpiry(t *testing.T) {
	const slack = 2 * time.Second
	s := newStore(t, Options{ClientTime: true, TTLSlack: slack})
	ctx := context.Background()
	for _, d := range []int64{50, 90_000, 3_600_000} {
		key := "ttl" + strconv.FormatInt(d, 10)
		a := gubernator.New(gubernator.Params{Limit: 5, Duration: d})
		if _, err := s.DecideOne(ctx, t0, store.Request{Algorithm: a, Key: key, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		rk, err := s.Key(a, key)
		if err != nil {
			t.Fatal(err)
		}
		v, err := shared.Do("PTTL", rk)
		if err != nil {
			t.Fatal(err)
		}
		pttl, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("PTTL %q: %q %v", rk, v, err)
		}
		most := d + 1 + slack.Milliseconds()
		if pttl > most || pttl < most-30_000 {
			t.Errorf("duration %d ms: the key's TTL is %d ms, want about %d (its state's expiry and the slack)", d, pttl, most)
		}
		// At the expiry the state is still read; a millisecond after, it is
		// gone: a new bucket answers.
		for _, at := range []int64{d, d + 1} {
			got, err := s.DecideOne(ctx, t0+at*1e6, store.Request{Algorithm: gubernator.New(gubernator.Params{Limit: 5, Duration: d}), Key: key})
			if err != nil {
				t.Fatal(err)
			}
			want := int64(4)
			if at > d {
				want = 5
			}
			if got.Remaining != want {
				t.Errorf("duration %d ms, %d ms later: remaining %d, want %d", d, at, got.Remaining, want)
			}
		}
	}
}
