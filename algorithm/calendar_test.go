package algorithm

import (
	"math/rand/v2"
	"testing"
	"time"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("zone %s: %v", name, err)
	}
	return loc
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestCalendarPeriods checks periods written out by hand, in UTC, across
// month ends, leap days and daylight-saving changes in both hemispheres
// and at midnight.
func TestCalendarPeriods(t *testing.T) {
	cases := []struct {
		cal        Calendar
		at         string // an instant in the period
		start, end string // the period, in UTC
	}{
		// New York: EST is UTC-5, EDT UTC-4; clocks go forward 2025-03-09
		// 02:00 and back 2025-11-02 02:00.
		{Calendar{"day", "America/New_York", 0}, "2025-03-09T12:00:00Z", "2025-03-09T05:00:00Z", "2025-03-10T04:00:00Z"}, // 23 h
		{Calendar{"day", "America/New_York", 0}, "2025-11-02T12:00:00Z", "2025-11-02T04:00:00Z", "2025-11-03T05:00:00Z"}, // 25 h
		{Calendar{"month", "America/New_York", 0}, "2025-03-15T00:00:00Z", "2025-03-01T05:00:00Z", "2025-04-01T04:00:00Z"},
		{Calendar{"month", "America/New_York", 15}, "2025-03-14T12:00:00Z", "2025-02-15T05:00:00Z", "2025-03-15T04:00:00Z"},
		{Calendar{"month", "America/New_York", 15}, "2025-03-15T04:00:00Z", "2025-03-15T04:00:00Z", "2025-04-15T04:00:00Z"},
		// Billing day 31: short months start on their last day; 2024 is a
		// leap year.
		{Calendar{"month", "", 31}, "2024-02-29T00:00:00Z", "2024-02-29T00:00:00Z", "2024-03-31T00:00:00Z"},
		{Calendar{"month", "", 31}, "2024-02-28T23:59:59Z", "2024-01-31T00:00:00Z", "2024-02-29T00:00:00Z"},
		{Calendar{"month", "", 31}, "2025-03-01T00:00:00Z", "2025-02-28T00:00:00Z", "2025-03-31T00:00:00Z"},
		{Calendar{"month", "", 30}, "2025-03-01T00:00:00Z", "2025-02-28T00:00:00Z", "2025-03-30T00:00:00Z"},
		{Calendar{"day", "", 0}, "2028-02-29T13:00:00Z", "2028-02-29T00:00:00Z", "2028-03-01T00:00:00Z"},
		// Sydney: AEST UTC+10, AEDT UTC+11; forward 2025-10-05 02:00, back
		// 2025-04-06 03:00.
		{Calendar{"day", "Australia/Sydney", 0}, "2025-10-05T06:00:00Z", "2025-10-04T14:00:00Z", "2025-10-05T13:00:00Z"}, // 23 h
		{Calendar{"day", "Australia/Sydney", 0}, "2025-04-06T06:00:00Z", "2025-04-05T13:00:00Z", "2025-04-06T14:00:00Z"}, // 25 h
		{Calendar{"month", "Australia/Sydney", 0}, "2025-10-15T00:00:00Z", "2025-09-30T14:00:00Z", "2025-10-31T13:00:00Z"},
		// Weeks: Monday 2025-11-03 in New York, the day after clocks went
		// back; a Sunday week.
		{Calendar{"week", "America/New_York", 1}, "2025-11-02T12:00:00Z", "2025-10-27T04:00:00Z", "2025-11-03T05:00:00Z"},
		{Calendar{"week", "America/New_York", 7}, "2025-11-02T12:00:00Z", "2025-11-02T04:00:00Z", "2025-11-09T05:00:00Z"},
		// A fiscal year from April.
		{Calendar{"year", "Europe/London", 4}, "2026-02-01T00:00:00Z", "2025-03-31T23:00:00Z", "2026-03-31T23:00:00Z"},
		// Havana moves its clocks at midnight: 2024-03-10 begins at 01:00
		// CDT (UTC-4), and is 23 hours long.
		{Calendar{"day", "America/Havana", 0}, "2024-03-10T12:00:00Z", "2024-03-10T05:00:00Z", "2024-03-11T04:00:00Z"},
		// Samoa skipped 2011-12-30: the 29th (UTC-10) ends where the 31st
		// (UTC+14) begins; a month from the 30th starts on the 31st.
		{Calendar{"day", "Pacific/Apia", 0}, "2011-12-30T05:00:00Z", "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z"},
		{Calendar{"month", "Pacific/Apia", 30}, "2011-12-30T12:00:00Z", "2011-12-30T10:00:00Z", "2012-01-29T10:00:00Z"},
	}
	for _, c := range cases {
		a, err := New(Config{Algorithm: FixedWindow, Limit: 1, Calendar: c.cal})
		if err != nil {
			t.Fatal(err)
		}
		cw := a.(*calendarWindow)
		at := utc(c.at).UnixNano()
		start, end := cw.Period(at)
		if start != utc(c.start).UnixNano() || end != utc(c.end).UnixNano() {
			t.Errorf("%s at %s: period %s .. %s, want %s .. %s", c.cal, c.at,
				time.Unix(0, start).UTC().Format(time.RFC3339), time.Unix(0, end).UTC().Format(time.RFC3339), c.start, c.end)
		}
	}
}

// TestCalendarPeriodsTile checks, for instants spread over three years in
// zones with every kind of transition, that the period holding t holds it,
// begins on a start date at its first instant, and ends where the next
// period begins.
func TestCalendarPeriodsTile(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Australia/Sydney", "America/Havana", "America/Santiago",
		"Asia/Beirut", "Australia/Lord_Howe", "Antarctica/Troll", "Asia/Kolkata", "Pacific/Apia", "Pacific/Chatham"}
	rng := rand.New(rand.NewPCG(3, 4))
	lo, hi := utc("2010-06-01T00:00:00Z").UnixNano(), utc("2026-12-31T00:00:00Z").UnixNano()
	for _, z := range zones {
		loc := mustZone(t, z)
		for _, c := range []Calendar{{"day", z, 0}, {"week", z, 1}, {"week", z, 7}, {"month", z, 0}, {"month", z, 31}, {"year", z, 4}} {
			a, err := New(Config{Algorithm: FixedWindow, Limit: 1, Calendar: c})
			if err != nil {
				t.Fatal(err)
			}
			cw := a.(*calendarWindow)
			for range 300 {
				at := lo + rng.Int64N(hi-lo)
				start, end := cw.Period(at)
				if at < start || at >= end {
					t.Fatalf("%s: %v not in its period %v .. %v", c, time.Unix(0, at), time.Unix(0, start), time.Unix(0, end))
				}
				if s2, _ := cw.Period(end); s2 != end {
					t.Fatalf("%s: the period after one ending %v starts %v", c, time.Unix(0, end), time.Unix(0, s2))
				}
				// The start is the first instant of its date.
				sd, pd := time.Unix(0, start).In(loc), time.Unix(0, start-1).In(loc)
				if y, m, d := pd.Date(); time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Equal(truncDay(sd)) {
					t.Fatalf("%s: period start %v is not the first instant of its date (%v is on it too)", c, sd, pd)
				}
				if !isStartDate(c, sd) {
					t.Fatalf("%s: period starts on %v", c, sd)
				}
			}
		}
	}
}

func truncDay(t time.Time) time.Time {
	y, m, d := t.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// isStartDate reports whether the local date of t can start a period of c:
// the start day itself, or (a month's start day past its end, or a start
// date the zone skipped) the first date after.
func isStartDate(c Calendar, t time.Time) bool {
	s := max(c.Start, 1)
	_, m, d := t.Date()
	prev := t.AddDate(0, 0, -1)
	switch c.Period {
	case "day":
		return true
	case "week":
		return (int(t.Weekday())+6)%7+1 == s || (int(prev.Weekday())+6)%7+1 == s
	case "month":
		return d == min(s, daysIn(t.Year(), m)) || d == 1 || prev.Day() == min(s, daysIn(prev.Year(), prev.Month()))
	}
	return (int(m) == s && d == 1) || (int(prev.Month()) == s && prev.Day() == 1)
}

// TestCalendarDecisions: the count resets exactly at the period's end, and
// every answer reports the time to it to the nanosecond, across a month
// end with a daylight-saving change inside the month.
func TestCalendarDecisions(t *testing.T) {
	a := mustNew(t, Config{Algorithm: FixedWindow, Limit: 3, Calendar: Calendar{"month", "America/New_York", 0}})
	st := make([]int64, a.Words())
	end := utc("2025-04-01T04:00:00Z").UnixNano()
	at := utc("2025-03-08T12:00:00Z").UnixNano() // before the change of clocks on the 9th
	for i := range int64(3) {
		d := a.Decide(st, at+i, 1)
		if !d.Allowed || d.ResetAfter != time.Duration(end-at-i) || d.Remaining != 2-i {
			t.Fatalf("request %d: %+v, want allowed, reset %v", i, d, time.Duration(end-at-i))
		}
	}
	d := a.Decide(st, end-1, 1)
	if d.Allowed || d.RetryAfter != 1 || d.ResetAfter != 1 {
		t.Fatalf("a nanosecond before the month ends: %+v, want rejected with 1ns to wait", d)
	}
	next := utc("2025-05-01T04:00:00Z").UnixNano()
	d = a.Decide(st, end, 1)
	if !d.Allowed || d.Remaining != 2 || d.ResetAfter != time.Duration(next-end) {
		t.Fatalf("at the month's end: %+v, want a fresh count with %v to the next", d, time.Duration(next-end))
	}
	// A clock that goes back into March keeps counting in April.
	d = a.Decide(st, end-int64(time.Hour), 1)
	if !d.Allowed || d.Remaining != 1 || d.ResetAfter != time.Duration(next-end) {
		t.Fatalf("clock stepped back into March: %+v", d)
	}
}

// TestCalendarCarryOver: a period's unused limit carries into the next one
// up to the cap; an idle period carries nothing; and any run of k
// consecutive periods counts at most k·L + the cap.
func TestCalendarCarryOver(t *testing.T) {
	a := mustNew(t, Config{Algorithm: FixedWindow, Limit: 100, CarryOver: 50, Calendar: Calendar{"day", "Europe/Berlin", 0}})
	st := make([]int64, a.Words())
	day := func(i int) int64 {
		return utc("2025-03-01T12:00:00Z").AddDate(0, 0, i).UnixNano()
	}
	use := func(at, n int64) Decision {
		t.Helper()
		var d Decision
		for range n {
			if d = a.Decide(st, at, 1); !d.Allowed {
				t.Fatalf("rejected: %+v", d)
			}
		}
		return d
	}
	use(day(0), 30)
	if d := a.Peek(st, day(1), 1); d.Limit != 150 {
		t.Fatalf("after 30 of 100, the next day's limit is %d, want 150", d.Limit)
	}
	use(day(1), 140)
	if d := a.Peek(st, day(2), 1); d.Limit != 110 {
		t.Fatalf("after 140 of 150, the next day's limit is %d, want 110", d.Limit)
	}
	// Nothing on day 3: day 4 gets no carry.
	if d := a.Peek(st, day(4), 1); d.Limit != 100 {
		t.Fatalf("after an idle day the limit is %d, want 100", d.Limit)
	}
	// A charge past the limit leaves nothing to carry.
	a.Record(st, day(5), 180)
	if d := a.Peek(st, day(6), 1); d.Limit != 100 {
		t.Fatalf("after overspending, the next day's limit is %d, want 100", d.Limit)
	}
	// The bound, on random use with idle days.
	rng := rand.New(rand.NewPCG(5, 6))
	clear(st)
	var counted []int64
	for i := 10; i < 400; i++ {
		var n int64
		if rng.IntN(6) != 0 {
			for rng.IntN(8) != 0 {
				if c := 1 + rng.Int64N(40); a.Decide(st, day(i), c).Allowed {
					n += c
				}
			}
		}
		counted = append(counted, n)
	}
	var most int64
	for i := range counted {
		var sum int64
		for k := i; k < len(counted); k++ {
			sum += counted[k]
			if bound := int64(k-i+1)*100 + 50; sum > bound {
				t.Fatalf("days %d..%d counted %d, bound %d", i, k, sum, bound)
			}
			most = max(most, sum-int64(k-i+1)*100)
		}
	}
	if most != 50 {
		t.Fatalf("the most any run exceeded k·L by is %d; the random use should reach the cap, 50", most)
	}
}
