package gubernator

import "time"

// Period is a DURATION_IS_GREGORIAN request's calendar period,
// read from a clock as gubernator reads it.
type Period struct {
	// Now is the clock's reading, in Unix milliseconds.
	Now int64
	// End is the period's last millisecond (gubernator's
	// GregorianExpiration).
	End int64
	// Length is gubernator's GregorianDuration: the period's length in
	// milliseconds (a week is 604,800,000 whatever daylight saving does).
	// V213 computes months and years as the period's end in nanoseconds
	// less its start in milliseconds, which makes a leaky bucket leak
	// nothing.
	Length int64
	// Invalid is set when Duration names no period the version supports
	// (a number above 5; V213 also refuses weeks, 3); a decision that
	// needs the period then fails with ReasonBadPeriod.
	Invalid bool
}

// PeriodAt returns the calendar period that duration names at now, in
// now's location, as gubernator version v's GregorianExpiration and
// GregorianDuration compute it.
func PeriodAt(now time.Time, duration int64, v Version) Period {
	p := Period{Now: now.UnixNano() / 1e6}
	y, m, d := now.Date()
	loc := now.Location()
	// length is a month's or a year's, as the version computes it.
	length := func(begin, next time.Time) int64 {
		if v == V213 {
			return next.Add(-time.Nanosecond).UnixNano() - begin.UnixNano()/1e6
		}
		return next.Sub(begin).Milliseconds()
	}
	var end time.Time
	switch {
	case duration == 0:
		end = now.Truncate(time.Minute).Add(time.Minute - time.Nanosecond)
		p.Length = 60000
	case duration == 1:
		end = time.Date(y, m, d, now.Hour(), 0, 0, 0, loc).Add(time.Hour - time.Nanosecond)
		p.Length = 3_600_000
	case duration == 2:
		end = time.Date(y, m, d, 23, 59, 59, int(time.Second-time.Nanosecond), loc)
		p.Length = 86_400_000
	case duration == 3 && v != V213:
		// The week ends on Sunday.
		end = time.Date(y, m, d+(7-int(now.Weekday()))%7, 23, 59, 59, int(time.Second-time.Nanosecond), loc)
		p.Length = 604_800_000
	case duration == 4:
		begin := time.Date(y, m, 1, 0, 0, 0, 0, loc)
		end = begin.AddDate(0, 1, 0).Add(-time.Nanosecond)
		p.Length = length(begin, begin.AddDate(0, 1, 0))
	case duration == 5:
		begin := time.Date(y, time.January, 1, 0, 0, 0, 0, loc)
		end = begin.AddDate(1, 0, 0).Add(-time.Nanosecond)
		p.Length = length(begin, begin.AddDate(1, 0, 0))
	default: // anything else, and weeks in V213
		p.Invalid = true
		return p
	}
	p.End = end.UnixNano() / 1e6
	return p
}
