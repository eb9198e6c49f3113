package rules

import (
	"strings"
	"testing"
	"time"
)

const monthly = `
domain: llm
rules:
  - name: monthly-spend
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 100
    calendar: {period: month, zone: America/New_York, start: 15}
    carry_over: 30
    overrides:
      - match: {plan: pro}
        limit: 500
`

// TestCalendarRule: a calendar rule counts per billing month in its zone,
// reports the time to the month's end and the month's length as its
// window, carries unused budget over, and an override changes its limit
// while the key keeps its count.
func TestCalendarRule(t *testing.T) {
	e, c := newTestEngine(t, monthly)
	ny, _ := time.LoadLocation("America/New_York")
	start := time.Date(2025, 2, 20, 12, 0, 0, 0, ny)
	c.ns.Store(start.UnixNano())
	end := time.Date(2025, 3, 15, 0, 0, 0, 0, ny) // the 15th in New York, after March's change of clocks
	r := check(t, e, Request{Descriptors: []Descriptor{desc("tenant=acme")}, Hits: 60})
	st := r.Statuses[0]
	if !r.Allowed || st.Decision.ResetAfter != end.Sub(start) || st.Window != end.Sub(time.Date(2025, 2, 15, 0, 0, 0, 0, ny)) ||
		st.Calendar != "month from the 15th in America/New_York, carrying over up to 30" {
		t.Fatalf("first check: %+v, want reset %v and a window of the month from Feb 15", st, end.Sub(start))
	}
	if info := e.Set().Rules()[0]; info.Calendar != "month from the 15th in America/New_York, carrying over up to 30" || info.Window != 0 {
		t.Fatalf("rule info: %+v", info)
	}
	// The pro plan's override sees the 60 counted.
	r = check(t, e, Request{Descriptors: []Descriptor{desc("tenant=acme", "plan=pro")}, Hits: 440})
	if !r.Allowed || r.Statuses[0].Decision.Remaining != 0 {
		t.Fatalf("pro override after 60: %+v", r.Statuses[0])
	}
	// Back on the plain plan: 500 counted, over 100.
	if r := check(t, e, one("tenant=acme")); r.Allowed {
		t.Fatalf("plain plan with 500 counted allowed: %+v", r.Statuses[0])
	}
	// A nanosecond before the month ends: still over; at its end, a new
	// month with nothing carried (500 > 100 used).
	c.ns.Store(end.UnixNano() - 1)
	if r := check(t, e, one("tenant=acme")); r.Allowed || r.Statuses[0].Decision.RetryAfter != 1 {
		t.Fatalf("just before the month ends: %+v", r.Statuses[0])
	}
	c.ns.Store(end.UnixNano())
	if r := check(t, e, one("tenant=acme")); !r.Allowed || r.Statuses[0].Decision.Limit != 100 {
		t.Fatalf("new month: %+v", r.Statuses[0])
	}
	// Another tenant uses 20 of 100 in March's month and gets 30 carried
	// into April's.
	check(t, e, Request{Descriptors: []Descriptor{desc("tenant=beta")}, Hits: 20})
	c.ns.Store(time.Date(2025, 4, 20, 0, 0, 0, 0, ny).UnixNano())
	if r := check(t, e, one("tenant=beta")); !r.Allowed || r.Statuses[0].Decision.Limit != 130 || r.Statuses[0].Decision.Remaining != 129 {
		t.Fatalf("after using 20 of 100: %+v, want a limit of 130", r.Statuses[0])
	}
}

// TestCalendarRuleErrors: every mistake in a calendar rule is an error
// that says what to write.
func TestCalendarRuleErrors(t *testing.T) {
	head := "domain: d\nrules:\n  - name: r\n    count_by: [k]\n    limit: 10\n"
	for _, c := range []struct{ rule, want string }{
		{"    window: 1m\n    calendar: {period: day}\n", "not both"},
		{"    calendar: {period: fortnight}\n", "want day, week, month or year"},
		{"    calendar: {period: month, zone: Mars/Olympus}\n", "Mars/Olympus"},
		{"    calendar: {period: week, start: 8}\n", "week starts on 1 to 7"},
		{"    calendar: {period: day, start: 2}\n", "a day period takes no start"},
		{"    calendar: {zone: UTC}\n", "period is missing"},
		{"    calendar: {period: month, day: 3}\n", "day"},
		{"    calendar: {period: month}\n    algorithm: bounded-log\n", "fixed window by definition"},
		{"    calendar: {period: month}\n    tolerance: 0.1\n", "does not apply to a calendar period"},
		{"    window: 1m\n    carry_over: 5\n", "carry_over needs a calendar period"},
		{"    calendar: {period: month, zone: Local}\n", "name the zone"},
		{"    calendar: month\n", "must be a mapping"},
		{"    calendar: {period: month}\n    overrides:\n      - match: {p: x}\n        window: 1h\n", "not its period"},
	} {
		_, err := Parse("t.yaml", []byte(head+c.rule))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("rule\n%s: error %v, want one saying %q", c.rule, err, c.want)
		}
	}
}
