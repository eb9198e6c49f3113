package algorithm

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Calendar makes a fixed window follow the calendar of a time zone: a day,
// a week, a month or a year, each starting at local midnight. It is the
// zero value (Period empty) for a window of fixed length.
//
// A period starts at the first instant of its start date: local midnight,
// or, where midnight does not exist on that date (a daylight-saving change
// at midnight), the first instant that does; a start date the zone skipped
// altogether (Pacific/Apia's 2011-12-30) starts the period with the next
// date. So a day lasts 23, 24 or 25 hours (or as the zone's rules say),
// and a month from 28 days less an hour to 31 days and an hour.
type Calendar struct {
	// Period is "day", "week", "month" or "year".
	Period string
	// Zone is an IANA time zone name, such as America/New_York; empty
	// means UTC.
	Zone string
	// Start is the day the period starts on: for a month, the day of the
	// month (1 to 31; a month shorter than that starts on its last day);
	// for a week, the day of the week (1 = Monday to 7 = Sunday); for a
	// year, the month (1 = January to 12). Zero means 1. A day takes none.
	Start int
}

// IsZero reports whether c is the zero Calendar: no calendar window.
func (c Calendar) IsZero() bool { return c == Calendar{} }

// String writes c as a rule file's window: "month from the 15th in
// America/New_York", "week from Monday", "day in Europe/Berlin".
func (c Calendar) String() string {
	s := c.Period
	st := max(c.Start, 1)
	switch c.Period {
	case "week":
		s += " from " + time.Weekday(st%7).String()
	case "month":
		s += " from the " + ordinal(st)
	case "year":
		s += " from " + time.Month(st).String()
	}
	if c.Zone != "" {
		s += " in " + c.Zone
	}
	return s
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// location checks c and loads its zone.
func (c Calendar) location() (*time.Location, error) {
	var lo, hi int
	switch c.Period {
	case "day":
	case "week":
		lo, hi = 1, 7
	case "month":
		lo, hi = 1, 31
	case "year":
		lo, hi = 1, 12
	default:
		return nil, fmt.Errorf("calendar period %q: want day, week, month or year", c.Period)
	}
	if c.Start != 0 && (c.Start < lo || c.Start > hi) {
		if hi == 0 {
			return nil, fmt.Errorf("calendar: a day period takes no start, got %d", c.Start)
		}
		return nil, fmt.Errorf("calendar: a %s starts on %d to %d, got %d", c.Period, lo, hi, c.Start)
	}
	if c.Zone == "Local" {
		return nil, fmt.Errorf("calendar zone Local: name the zone (such as Europe/Berlin), so that every node agrees")
	}
	loc, err := time.LoadLocation(c.Zone)
	if err != nil {
		return nil, fmt.Errorf("calendar zone %q: %v", c.Zone, err)
	}
	return loc, nil
}

// longest is at least the longest any period of c lasts, with room for
// the largest daylight-saving shift (two hours).
func (c Calendar) longest() time.Duration {
	const day = 24 * time.Hour
	switch c.Period {
	case "day":
		return day + 2*time.Hour
	case "week":
		return 7*day + 2*time.Hour
	case "month":
		return 31*day + 2*time.Hour
	}
	return 366*day + 2*time.Hour
}

// startDate returns the date the period k periods after the one holding
// the local date y-m-d (a weekday wd) starts on, not normalized.
func (c Calendar) startDate(y int, m time.Month, d int, wd time.Weekday, k int) (int, time.Month, int) {
	s := max(c.Start, 1)
	switch c.Period {
	case "day":
		return y, m, d + k
	case "week":
		back := ((int(wd)+6)%7 + 1 - s + 7) % 7 // days since the week's start day
		return y, m, d - back + 7*k
	case "month":
		if d < min(s, daysIn(y, m)) {
			m--
		}
		t := time.Date(y, m+time.Month(k), 1, 0, 0, 0, 0, time.UTC)
		return t.Year(), t.Month(), min(s, daysIn(t.Year(), t.Month()))
	}
	if int(m) < s {
		y--
	}
	return y + k, time.Month(s), 1
}

// daysIn returns the number of days of month m of year y.
func daysIn(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// dayStart returns the first instant whose date in loc is y-m-d (which
// time.Date normalizes) or later.
func dayStart(y int, m time.Month, d int, loc *time.Location) time.Time {
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	// time.Date picks either side of a gap that hides midnight; at most a
	// few zone changes separate t from the date's first instant.
	for range 8 {
		ly, lm, ld := t.Date()
		switch got := time.Date(ly, lm, ld, 0, 0, 0, 0, time.UTC); {
		case got.Before(want):
			// Before the date: it begins where the zone in effect at t ends.
			_, end := t.ZoneBounds()
			if !end.After(t) {
				return t
			}
			t = end
		case t.Hour() != 0 || t.Minute() != 0 || t.Second() != 0 || t.Nanosecond() != 0:
			// On the date, after its midnight (which did not exist): it
			// begins where the zone in effect at t begins, if that is on
			// the date too.
			start, _ := t.ZoneBounds()
			sy, sm, sd := start.Date()
			if !start.Before(t) || time.Date(sy, sm, sd, 0, 0, 0, 0, time.UTC).Before(want) {
				return t
			}
			t = start
		default:
			return t
		}
	}
	return t
}

// span is one calendar period and the start of the one before it, in Unix
// nanoseconds.
type span struct{ prev, start, end int64 }

// calendarClock finds the period a time falls in, keeping the last one it
// found so that the common case is two comparisons.
type calendarClock struct {
	cal  Calendar
	loc  *time.Location
	last atomic.Pointer[span]
}

// at returns the period holding t (Unix nanoseconds, within [0, maxTime]).
func (k *calendarClock) at(t int64) span {
	if p := k.last.Load(); p != nil && t >= p.start && t < p.end {
		return *p
	}
	b := k.bounds(t)
	p := &span{prev: b[1], start: b[2], end: b[3]}
	k.last.Store(p)
	return *p
}

// bounds returns the starts of the five periods around the one holding t:
// two before it, its own, and two after it.
func (k *calendarClock) bounds(t int64) (b [5]int64) {
	lt := time.Unix(0, t).In(k.loc)
	y, m, d := lt.Date()
	for i := range b {
		sy, sm, sd := k.cal.startDate(y, m, d, lt.Weekday(), i-2)
		b[i] = dayStart(sy, sm, sd, k.loc).UnixNano()
	}
	return b
}

// calendarWindow is a fixed window whose windows are calendar periods, with
// the unused part of a period's limit carried into the next one up to
// carryCap.
//
// State: [0] the start of the state's period (Unix ns), [1] the units
// counted in it, [2] the units carried into it.
type calendarWindow struct {
	base
	limit, carryCap int64
	clock           calendarClock
}

func newCalendarWindow(c Config, loc *time.Location) *calendarWindow {
	idle := c.Calendar.longest()
	if c.CarryOver > 0 {
		idle *= 2 // the next period reads what this one left unused
	}
	a := &calendarWindow{
		base:     base{cfg: c, words: 3, idle: idle},
		limit:    c.Limit,
		carryCap: c.CarryOver,
		clock:    calendarClock{cal: c.Calendar, loc: loc},
	}
	a.withParams(Params{Calendar: c.Calendar, CarryOver: c.CarryOver})
	return a
}

// HalfWords reports false: the period's start needs a whole word.
func (a *calendarWindow) HalfWords() bool { return false }

// Bounds returns, in Unix nanoseconds, the starts of the five periods
// around the one now falls in (two before it, its own, two after it), for a
// store that decides elsewhere without a time zone database (the Redis
// script): with them it finds the period of a clock up to a period away
// from now, and the period before that one.
func (a *calendarWindow) Bounds(now int64) [5]int64 { return a.clock.bounds(clampTime(now)) }

// Period returns the start and end (Unix nanoseconds) of the period now
// falls in.
func (a *calendarWindow) Period(now int64) (start, end int64) {
	p := a.clock.at(clampTime(now))
	return p.start, p.end
}

// repair zeroes a state no calendarWindow could have written.
func (a *calendarWindow) repair(s []int64) {
	if s[0] < 0 || s[0] > maxTime || s[1] < 0 || s[2] < 0 || s[2] > MaxLimit {
		clear(s)
	}
}

// roll returns the period of now and the state as of it: count and carry,
// with a state from an earlier period rolled over (nothing counted, the
// carry from the period before if the state is from that one). A clock
// that went back to an earlier period than the state's keeps counting in
// the state's, as of its start.
func (a *calendarWindow) roll(s []int64, now int64) (p span, t, n, carry int64) {
	t = clampTime(now)
	p = a.clock.at(t)
	n, carry = s[1], s[2]
	switch {
	case s[0] > p.start:
		t = s[0]
		p = a.clock.at(t)
	case s[0] < p.start:
		left := int64(0)
		if s[0] == p.prev && n > 0 {
			left = nonNeg(a.limit + carry - n)
		}
		n, carry = 0, min(a.carryCap, left)
	}
	return p, t, n, carry
}

func (a *calendarWindow) decide(s []int64, now, cost int64, commit bool) Decision {
	s = s[:3:3]
	a.repair(s)
	p, t, n, carry := a.roll(s, now)
	limit := a.limit + carry
	reset := time.Duration(p.end - t)
	d := Decision{Limit: limit, Remaining: nonNeg(limit - n), ResetAfter: reset}
	if d.Reason = badCost(cost, limit); d.Reason != "" {
		return d
	}
	if n+cost > limit {
		d.Reason, d.RetryAfter = ReasonOverLimit, reset
		return d
	}
	if commit {
		s[0], s[1], s[2] = p.start, n+cost, carry
	}
	d.Allowed, d.Remaining = true, limit-n-cost
	return d
}

// Decide decides and, if allowed, records the request.
func (a *calendarWindow) Decide(s []int64, now, cost int64) Decision {
	return a.decide(s, now, cost, true)
}

// Peek is Decide without changing the state.
func (a *calendarWindow) Peek(s []int64, now, cost int64) Decision {
	var c [3]int64
	copy(c[:], s[:3])
	return a.decide(c[:], now, cost, false)
}

// Record adds cost to the period now falls in; an event from a period
// older than the state's no longer counts and is dropped.
func (a *calendarWindow) Record(s []int64, now, cost int64) {
	s = s[:3:3]
	if cost < 1 {
		return
	}
	a.repair(s)
	t := clampTime(now)
	if s[0] > a.clock.at(t).start {
		return
	}
	p, _, n, carry := a.roll(s, t)
	s[0], s[1], s[2] = p.start, addSat(n, min(cost, MaxLimit)), carry
}

// Used returns the units counted in now's period (past the limit when a
// charge overspent it).
func (a *calendarWindow) Used(s []int64, now int64) int64 {
	var c [3]int64
	copy(c[:], s[:3])
	a.repair(c[:])
	_, _, n, _ := a.roll(c[:], now)
	return n
}

func (a *calendarWindow) convertFrom(from Algorithm, src, dst []int64, now int64) {
	copy(dst, src[:3])
	dst[2] = min(dst[2], a.carryCap) // a lowered cap applies to what was carried
}
