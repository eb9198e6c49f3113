package gubernator

import (
	"testing"
	"time"
)

// The cases of gubernator v2.21.0's own tests (functional_test.go,
// scheduled_admission_test.go, interval_test.go), on one key, with the
// answers its algorithms.go and interval.go give; each differs from
// v2.13.0's answer (TestV221CasesFailOnV213).

// v221Token is TestTokenBucketStatusFollowsAdmission and a status query:
// a stored OVER_LIMIT no longer outlives a bucket with room.
func v221Token() []gubStep {
	two := Params{Limit: 2, Duration: 60_000}
	five := Params{Limit: 5, Duration: 60_000}
	second := Params{Limit: 2, Duration: 1000}
	return []gubStep{
		{at: 1000, p: two, hits: 2, rem: 0, reset: 61_000},
		{at: 1000, p: two, hits: 1, over: true, rem: 0, reset: 61_000},
		{at: 1000, p: two, hits: 0, over: true, rem: 0, reset: 61_000}, // empty: the stored status
		{at: 1000, p: five, hits: 0, rem: 3, reset: 61_000},            // a raised limit clears it
		{at: 1000, p: five, hits: 1, rem: 2, reset: 61_000},
		{at: 1000, p: five, hits: 1, rem: 1, reset: 61_000},
		// The duration shrinks past now: the bucket renews and admits.
		{at: 3000, p: second, hits: 1, rem: 1, reset: 4000},
		{at: 3000, p: second, hits: 1, rem: 0, reset: 4000},
	}
}

// v221Leaky is TestLeakyBucketFractionalTokens and a change of burst: the
// leak is credited as a fraction every time, and the balance never passes
// the burst.
func v221Leaky() ([]gubStep, []gubStep, []gubStep, []gubStep) {
	ten := Params{Leaky: true, Limit: 10, Duration: 10_000, Burst: 10} // a token a second
	leftover := []gubStep{
		{at: 0 + 1, p: ten, hits: 10, rem: 0, reset: 10_001},
		{at: 1501, p: ten, hits: 1, rem: 0, reset: 11_501}, // 1.5 leaked, 0.5 left
		{at: 2001, p: ten, hits: 1, rem: 0, reset: 12_001}, // 0.5 more: one whole token
	}
	seven := Params{Leaky: true, Limit: 7, Duration: 60_000, Burst: 3} // 8571.43 ms a token
	clamp := []gubStep{
		{at: 1, p: seven, hits: 1, rem: 2, reset: 1 + 5*8571},
		{at: 8573, p: seven, hits: 0, rem: 3, reset: 8573 + 4*8571},
		{at: 11_573, p: seven, hits: 2, rem: 1, reset: 11_573 + 6*8571},
		{at: 17_573, p: seven, hits: 2, over: true, rem: 1, reset: 17_573 + 6*8571},
	}
	lb := Params{Leaky: true, Limit: 10, Duration: 1000}
	wide, narrow := lb, lb
	wide.Burst, narrow.Burst = 20, 5
	burst := []gubStep{
		{at: 1, p: lb, hits: 4, rem: 6, reset: 401},
		{at: 1, p: wide, hits: 0, rem: 16, reset: 1 - 6*100}, // shifted by +10, not filled to 20
		{at: 1, p: narrow, hits: 0, rem: 1, reset: 901},      // shifted by -15
	}
	// 10000/14 ms a token leaks 6.999999999999999 in 5 s: the epsilon of
	// wholeTokens reads it as the 7 it is.
	fourteen := Params{Leaky: true, Limit: 14, Duration: 10_000}
	epsilon := []gubStep{
		{at: 1, p: fourteen, hits: 14, rem: 0, reset: 1 + 14*714},
		{at: 5001, p: fourteen, hits: 7, rem: 0, reset: 5001 + 14*714},
	}
	return leftover, clamp, burst, epsilon
}

// v221Calendar is TestTokenBucketGregorianWeek and
// TestLeakyBucketGregorianMonthsAndYears: weeks are periods ending on
// Sunday, and a month leaks at its true length.
func v221Calendar(v Version) ([]gubStep, []gubStep) {
	tuesday := time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)
	sunday := time.Date(2026, 4, 5, 23, 59, 59, 999e6, time.UTC).UnixMilli()
	week := Params{Limit: 3, Duration: 3, Behavior: Gregorian, Period: PeriodAt(tuesday, 3, v)}
	weeks := []gubStep{{at: tuesday.UnixMilli(), p: week, hits: 1, rem: 2, reset: sunday}}
	october := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	quarter := october.Add(31 * 24 * time.Hour / 4)
	month := Params{Leaky: true, Limit: 1000, Burst: 10_000, Duration: 4, Behavior: Gregorian}
	first, later := month, month
	first.Period, later.Period = PeriodAt(october, 4, v), PeriodAt(quarter, 4, v)
	rate := int64(31 * 24 * 3_600_000 / 1000) // ms a token
	months := []gubStep{
		{at: october.UnixMilli(), p: first, hits: 9500, rem: 500, reset: october.UnixMilli()}, // rate 4 ms / 1000: 0 ms a token,
		{at: quarter.UnixMilli(), p: later, hits: 0, rem: 750, reset: quarter.UnixMilli() + 250*rate},
	}
	return weeks, months
}

// v221Scheduled is TestScheduledAdmissionWorkedExample, ...Boundary,
// ...Ceiling, ...NeverFits and ...KeepsDebtCached: max_wait books hits
// ahead as a debt, timed by the decision's clock.
func v221Scheduled() [][]gubStep {
	per := func(hits, maxWait int64) Params {
		return Params{Leaky: true, Limit: 10, Duration: 60_000, Burst: 10, MaxWait: maxWait, WaitCeiling: 300_000}
	}
	var worked []gubStep
	const t0 = 1_000_000
	for i := range int64(10) {
		worked = append(worked, gubStep{at: t0, p: per(1, 120_000), hits: 1, rem: 9 - i, reset: t0 + (i+1)*6000})
	}
	for i := range int64(20) {
		worked = append(worked, gubStep{at: t0, p: per(1, 120_000), hits: 1, reason: ReasonScheduled,
			rem: 0, reset: t0 + (11+i)*6000, retry: (i + 1) * 6000})
	}
	for range 2 { // 126 s away, past max_wait: refused, nothing charged
		worked = append(worked, gubStep{at: t0, p: per(1, 120_000), hits: 1, over: true, rem: 0, reset: t0 + 30*6000, retry: 126_000})
	}
	// Past the bucket's duration, the debt is still there (its expiry is
	// when the bucket is full again), and the leak pays part of it.
	worked = append(worked, gubStep{at: t0 + 61_000, p: per(0, 0), hits: 0, rem: 0, reset: t0 + 30*6000})
	worked = append(worked, gubStep{at: t0 + 180_000, p: per(0, 0), hits: 0, rem: 10, reset: t0 + 180_000})

	boundary := []gubStep{
		{at: t0, p: per(10, 0), hits: 10, rem: 0, reset: t0 + 60_000},
		{at: t0, p: per(1, 5999), hits: 1, over: true, rem: 0, reset: t0 + 60_000, retry: 6000},
		{at: t0, p: per(1, 6000), hits: 1, reason: ReasonScheduled, rem: 0, reset: t0 + 66_000, retry: 6000},
		{at: t0, p: per(1, 11_999), hits: 1, over: true, rem: 0, reset: t0 + 66_000, retry: 12_000},
	}
	slow := Params{Leaky: true, Limit: 1, Duration: 200_000, Burst: 1, MaxWait: 1_000_000, WaitCeiling: 300_000}
	ceiling := []gubStep{
		{at: t0, p: slow, hits: 1, rem: 0, reset: t0 + 200_000},
		{at: t0, p: slow, hits: 1, reason: ReasonScheduled, rem: 0, reset: t0 + 400_000, retry: 200_000},
		{at: t0, p: slow, hits: 1, over: true, rem: 0, reset: t0 + 400_000, retry: 400_000}, // past the ceiling
	}
	never := []gubStep{
		{at: t0, p: per(11, 60_000), hits: 11, reason: ReasonNeverFits, rem: 10, reset: t0}, // no bucket made
		{at: t0, p: per(0, 0), hits: 0, rem: 10, reset: t0},
		{at: t0, p: per(1, 0), hits: 1, rem: 9, reset: t0 + 6000},
		{at: t0, p: per(11, 60_000), hits: 11, reason: ReasonNeverFits, rem: 9, reset: t0 + 6000},
		{at: t0, p: per(0, 0), hits: 0, rem: 9, reset: t0 + 6000},
	}
	return [][]gubStep{worked, boundary, ceiling, never}
}

func TestGubernatorV221Token(t *testing.T) { runGub(t, V221, v221Token()) }

func TestGubernatorV221Leaky(t *testing.T) {
	leftover, clamp, burst, epsilon := v221Leaky()
	t.Run("epsilon", func(t *testing.T) { runGub(t, V221, epsilon) })
	t.Run("leftover", func(t *testing.T) { runGub(t, V221, leftover) })
	t.Run("clamp", func(t *testing.T) { runGub(t, V221, clamp) })
	t.Run("burst", func(t *testing.T) { runGub(t, V221, burst) })
}

func TestGubernatorV221Calendar(t *testing.T) {
	weeks, months := v221Calendar(V221)
	t.Run("weeks", func(t *testing.T) { runGub(t, V221, weeks) })
	t.Run("months", func(t *testing.T) { runGub(t, V221, months) })
	october := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at       time.Time
		duration int64
		want     time.Duration
	}{
		{october, 4, 31 * 24 * time.Hour},
		{time.Date(2026, 2, 10, 0, 0, 0, 0, time.UTC), 4, 28 * 24 * time.Hour},
		{october, 5, 365 * 24 * time.Hour},
		{time.Date(2028, 7, 1, 0, 0, 0, 0, time.UTC), 5, 366 * 24 * time.Hour},
		{october, 3, 7 * 24 * time.Hour},
	} {
		if got := PeriodAt(c.at, c.duration, V221).Length; got != c.want.Milliseconds() {
			t.Errorf("PeriodAt(%v, %d).Length = %d, want %d", c.at, c.duration, got, c.want.Milliseconds())
		}
	}
}

func TestGubernatorV221Scheduled(t *testing.T) {
	for i, steps := range v221Scheduled() {
		t.Run([]string{"worked", "boundary", "ceiling", "never"}[i], func(t *testing.T) { runGub(t, V221, steps) })
	}
}

// TestV221CasesFailOnV213: every sequence above gets another answer from
// V213 (max_wait ignored there), so these tests hold v2.21.0's behaviour.
func TestV221CasesFailOnV213(t *testing.T) {
	leftover, clamp, burst, epsilon := v221Leaky()
	weeks, months := v221Calendar(V213)
	cases := append([][]gubStep{v221Token(), leftover, clamp, burst, epsilon, weeks, months}, v221Scheduled()...)
	for i, steps := range cases {
		if checkGub(V213, steps) == nil {
			t.Errorf("sequence %d: V213 answers as V221", i)
		}
	}
}
