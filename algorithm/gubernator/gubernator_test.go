package gubernator

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// gubStep is one request of a gubernator sequence on one key and what
// gubernator answers it (worked out from its algorithms.go; the
// interop/gubernator module compares with gubernator itself).
type gubStep struct {
	at     int64 // ms: the clock and created_at
	p      Params
	hits   int64
	over   bool
	rem    int64
	reset  int64            // reset_time, ms
	reason algorithm.Reason // ReasonBadPeriod, ReasonScheduled or ReasonNeverFits; over says OVER_LIMIT
	retry  int64            // retry_after, ms
}

func runGub(t *testing.T, v Version, steps []gubStep) {
	t.Helper()
	if err := checkGub(v, steps); err != nil {
		t.Fatal(err)
	}
}

// checkGub decides steps on one key as version v and returns the first
// answer that differs from the step's.
func checkGub(v Version, steps []gubStep) error {
	st := make([]int64, gubWords)
	for i, s := range steps {
		p := s.p
		p.CreatedAt, p.Version = s.at, v
		d := New(p).Decide(st, s.at*1e6, s.hits)
		if !d.Allowed {
			return fmt.Errorf("step %d: not Allowed: every gubernator decision is applied", i)
		}
		if s.reason == ReasonBadPeriod {
			if d.Reason != ReasonBadPeriod {
				return fmt.Errorf("step %d: got %+v, want ReasonBadPeriod", i, d)
			}
			continue
		}
		got := gubStep{over: d.Reason == algorithm.ReasonOverLimit, rem: d.Remaining, reset: s.at + int64(d.ResetAfter/time.Millisecond),
			retry: int64(d.RetryAfter / time.Millisecond)}
		if d.Reason == ReasonScheduled || d.Reason == ReasonNeverFits || d.Reason == ReasonBadPeriod {
			got.reason = d.Reason
		}
		if got.over != s.over || got.reason != s.reason || got.rem != s.rem || got.reset != s.reset || got.retry != s.retry || d.Limit != p.Limit {
			return fmt.Errorf("step %d (at %d, hits %d): got over=%v %q remaining=%d reset=%d retry=%d limit=%d, want over=%v %q remaining=%d reset=%d retry=%d limit=%d",
				i, s.at, s.hits, got.over, got.reason, got.rem, got.reset, got.retry, d.Limit, s.over, s.reason, s.rem, s.reset, s.retry, p.Limit)
		}
	}
	return nil
}

// The tests below hold V213: gubernator v2.13.0.

func TestGubernatorTokenBucket(t *testing.T) {
	tb := Params{Limit: 10, Duration: 1000}
	drain := tb
	drain.Behavior = DrainOverLimit
	reset := tb
	reset.Behavior = ResetRemaining
	raised := tb
	raised.Limit = 12
	longer := tb
	longer.Duration = 5000
	leaky := Params{Leaky: true, Limit: 10, Duration: 1000}
	runGub(t, V213, []gubStep{
		{at: 1000, p: tb, hits: 1, rem: 9, reset: 2000},
		{at: 1100, p: tb, hits: 12, over: true, rem: 9, reset: 2000}, // more than left: unchanged
		{at: 1200, p: tb, hits: 9, rem: 0, reset: 2000},              // takes the rest
		{at: 1300, p: tb, hits: 1, over: true, rem: 0, reset: 2000},  // already at the limit: stored
		{at: 1400, p: tb, hits: 0, over: true, rem: 0, reset: 2000},  // the stored status
		{at: 1500, p: raised, hits: 1, over: true, rem: 1, reset: 2000},
		{at: 1600, p: raised, hits: 0, over: true, rem: 1, reset: 2000},
		{at: 2001, p: tb, hits: 3, rem: 7, reset: 3001}, // expired: a new item
		{at: 2100, p: drain, hits: 8, over: true, rem: 0, reset: 3001},
		{at: 2200, p: tb, hits: -4, rem: 4, reset: 3001},              // negative hits give back
		{at: 2300, p: reset, hits: 5, rem: 10, reset: 0},              // the item goes; hits ignored
		{at: 2400, p: tb, hits: 11, over: true, rem: 10, reset: 3400}, // a new item, over: kept
		{at: 2500, p: tb, hits: 1, rem: 9, reset: 3400},
		{at: 2600, p: longer, hits: 1, rem: 8, reset: 7400}, // duration change: from creation
		{at: 3000, p: leaky, hits: 1, rem: 9, reset: 3100},  // switching algorithm starts over
		{at: 3100, p: tb, hits: 2, rem: 8, reset: 4100},
	})
}

func TestGubernatorTokenRenewal(t *testing.T) {
	tb := Params{Limit: 5, Duration: 10_000}
	short := tb
	short.Duration = 1000
	runGub(t, V213, []gubStep{
		{at: 0 + 1000, p: tb, hits: 5, rem: 0, reset: 11_000},
		// The new duration ends before now: the item renews, but the
		// answer keeps the remaining it had (gubernator reads it first).
		{at: 5000, p: short, hits: 1, over: true, rem: 0, reset: 6000},
		// The renewed item's allowance, with the stored status.
		{at: 5100, p: short, hits: 1, over: true, rem: 4, reset: 6000},
	})
}

func TestGubernatorLeakyBucket(t *testing.T) {
	lb := Params{Leaky: true, Limit: 10, Duration: 1000} // 100 ms a unit
	drain := lb
	drain.Behavior = DrainOverLimit
	burst := lb
	burst.Burst = 20
	reset := lb
	reset.Behavior = ResetRemaining
	runGub(t, V213, []gubStep{
		{at: 1000, p: lb, hits: 4, rem: 6, reset: 1400},
		{at: 1050, p: lb, hits: 0, rem: 6, reset: 1450}, // half a unit leaked: not applied yet
		{at: 1250, p: lb, hits: 1, rem: 7, reset: 1550}, // 2.5 leaked: 8.5, less 1
		{at: 1300, p: lb, hits: 9, over: true, rem: 7, reset: 1600},
		{at: 1300, p: drain, hits: 9, over: true, rem: 0, reset: 1600}, // drained; reset of before
		{at: 1300, p: lb, hits: 1, over: true, rem: 0, reset: 2300},
		{at: 1300, p: burst, hits: 0, rem: 20, reset: 300}, // a larger burst fills up to it
		{at: 1300, p: lb, hits: 0, rem: 10, reset: 1300},   // burst 0 = limit: clamped to it
		{at: 1500, p: lb, hits: 3, rem: 7, reset: 1800},    // leak, clamp to 10, less 3
		{at: 1500, p: reset, hits: 2, rem: 8, reset: 1700},
		{at: 1500, p: lb, hits: 8, rem: 0, reset: 2500},
		{at: 2700, p: lb, hits: 1, rem: 9, reset: 2800}, // expired at 2500: new
		{at: 2800, p: lb, hits: 11, over: true, rem: 10, reset: 2800},
	})
	runGub(t, V213, []gubStep{
		{at: 5000, p: lb, hits: 11, over: true, rem: 0, reset: 6000}, // a new item, over: drained and kept
		{at: 5100, p: lb, hits: 1, rem: 0, reset: 6100},
	})
}

func TestGubernatorGregorian(t *testing.T) {
	now := time.Date(2026, 3, 31, 23, 59, 30, 0, time.UTC)
	at := now.UnixMilli()
	minute := Params{Limit: 3, Duration: 0, Behavior: Gregorian, Period: PeriodAt(now, 0, V213)}
	weeks := Params{Limit: 3, Duration: 3, Behavior: Gregorian, Period: PeriodAt(now, 3, V213)}
	month := Params{Leaky: true, Limit: 3, Duration: 4, Behavior: Gregorian, Period: PeriodAt(now, 4, V213)}
	end := time.Date(2026, 3, 31, 23, 59, 59, 999e6, time.UTC).UnixMilli()
	if minute.Period.End != end || minute.Period.Length != 60000 {
		t.Fatalf("minute period %+v, want end %d", minute.Period, end)
	}
	runGub(t, V213, []gubStep{
		{at: at, p: weeks, hits: 1, reason: ReasonBadPeriod},
		{at: at, p: minute, hits: 1, rem: 2, reset: end},
		{at: at + 10, p: minute, hits: 1, rem: 1, reset: end},
	})
	// A leaky bucket by the month: gubernator's period length (end in ns
	// less start in ms) is so long that the bucket never leaks, and
	// reset_time lies far beyond what Floodgate reports exactly: it
	// saturates 2^43 ms ahead.
	runGub(t, V213, []gubStep{
		// A new item's rate comes from the duration as given (4 ms / 3).
		{at: at, p: month, hits: 1, rem: 2, reset: at + 1},
		{at: at + 20_000, p: month, hits: 1, rem: 1, reset: at + 20_000 + 1<<43},
	})
}

func TestGubernatorPeekRecordSplit(t *testing.T) {
	p := Params{Limit: 10, Duration: 1000, CreatedAt: 1000}
	a := New(p) // V221: Peek, Record and Split are the same in both versions
	st := make([]int64, a.Words())
	a.Decide(st, 1000e6, 4)
	before := append([]int64(nil), st...)
	if d := a.Peek(st, 1000e6, 3); d.Remaining != 3 {
		t.Fatalf("peek: %+v", d)
	}
	for i := range st {
		if st[i] != before[i] {
			t.Fatalf("Peek changed the state: %v -> %v", before, st)
		}
	}
	// Record is what an owner does with GLOBAL hits: over the limit, it
	// drains.
	a.Record(st, 1100e6, 7)
	if d := a.Peek(st, 1100e6, 0); d.Remaining != 0 {
		t.Fatalf("after Record of 7 of 6 left: %+v, want drained", d)
	}
	s := New(Params{Limit: 10, Burst: 7, Duration: 1000}).(interface{ Split(int) algorithm.Algorithm }).Split(3)
	if q := s.(*gubernator).p; q.Limit != 3 || q.Burst != 2 {
		t.Fatalf("split: %+v", q)
	}
	if a.Config() != New(Params{Limit: 99, Leaky: true}).Config() {
		t.Fatal("every gubernator request must share one algorithm.Config, the state's identity")
	}
}
