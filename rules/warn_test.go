package rules

import (
	"context"
	"strings"
	"testing"
	"time"
)

const warned = `
domain: llm
rules:
  - name: monthly
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 100
    calendar: {period: month, zone: UTC}
    warn_at: 0.8
  - name: rolling
    match: {user: "*"}
    count_by: [user]
    limit: 10
    window: 1m
    warn_at: 0.75
  - name: quiet
    match: {user: "*"}
    count_by: [user]
    limit: 1000
    window: 1m
`

// TestWarnAtParsed: warn_at takes a fraction above 0 and at most 1, on a
// rule with a limit, and says so otherwise.
func TestWarnAtParsed(t *testing.T) {
	set := mustParse(t, warned)
	if got := set.Rules()[0].WarnAt; got != 0.8 {
		t.Fatalf("RuleInfo.WarnAt = %v, want 0.8", got)
	}
	for _, c := range []struct{ field, want string }{
		{"warn_at: 0", "warn_at (a fraction of the limit, such as 0.8) must be above 0 and at most 1"},
		{"warn_at: 1.5", "must be above 0 and at most 1; got 1.5"},
		{"warn_at: high", "must be a number"},
		{"warn_at: 0.8\n    unlimited: true", "an unlimited rule never warns"},
	} {
		text := "domain: d\nrules:\n  - name: r\n    match: {k: \"*\"}\n    count_by: [k]\n    " + c.field + "\n"
		if !strings.Contains(c.field, "unlimited") {
			text += "    limit: 10\n    window: 1m\n"
		}
		_, err := Parse("r.yaml", []byte(text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.field, err, c.want)
		}
	}
}

// TestWarningCrossedOncePerPeriod: a calendar rule's key is in warning from
// the request that takes it to 80 of 100, which alone crossed; the next
// period starts below the level and crosses again.
func TestWarningCrossedOncePerPeriod(t *testing.T) {
	e, c := newTestEngine(t, warned)
	c.ns.Store(time.Date(2025, 1, 31, 12, 0, 0, 0, time.UTC).UnixNano())
	req := Request{Descriptors: []Descriptor{desc("tenant=acme")}, Hits: 30}
	var states []string
	for range 4 {
		r := check(t, e, req)
		st := r.Statuses[0]
		states = append(states, flags(st.Warning, st.CrossedWarning))
		if st.Warning != r.Warning() {
			t.Fatalf("Result.Warning %v, status %v", r.Warning(), st.Warning)
		}
	}
	// 30 (below), 60 (below), 90 (crossed), 120 rejected (in warning, not crossed).
	if got := strings.Join(states, " "); got != "- - WC W" {
		t.Fatalf("warning states %q, want %q", got, "- - WC W")
	}
	want := time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)
	if r := check(t, e, Request{Descriptors: []Descriptor{desc("tenant=acme")}, Peek: true}); !r.Statuses[0].Warning ||
		r.Statuses[0].CrossedWarning || !r.Statuses[0].PeriodEnd.Equal(want) || r.Statuses[0].Used != 90 {
		t.Fatalf("peek in warning: %+v, want warning, not crossed, used 90, period end %v", r.Statuses[0], want)
	}
	c.ns.Store(want.UnixNano()) // February
	if r := check(t, e, Request{Descriptors: []Descriptor{desc("tenant=acme")}, Hits: 79}); r.Statuses[0].Warning {
		t.Fatalf("79 of 100 in a new month: %+v", r.Statuses[0])
	}
	if r := check(t, e, one("tenant=acme")); !r.Statuses[0].CrossedWarning {
		t.Fatalf("80 of 100 in a new month did not cross: %+v", r.Statuses[0])
	}
}

// TestWarningRejectedCountsNothing: a request another rule rejects counts
// nothing, so it crosses nothing, even where its own rule allowed it.
func TestWarningRejectedCountsNothing(t *testing.T) {
	e, _ := newTestEngine(t, warned)
	d := desc("user=u1")
	for range 7 {
		check(t, e, Request{Descriptors: []Descriptor{d}})
	}
	// 8 would cross rolling's 7.5 -> 8; quiet rejects 1001 hits, so nothing counts.
	r := check(t, e, Request{Descriptors: []Descriptor{d}, Hits: 1001})
	if r.Allowed || r.Statuses[0].CrossedWarning || r.Statuses[0].Warning {
		t.Fatalf("rejected request: %+v", r.Statuses[0])
	}
	r = check(t, e, Request{Descriptors: []Descriptor{d}})
	if !r.Statuses[0].Warning || !r.Statuses[0].CrossedWarning || r.Statuses[1].Warning {
		t.Fatalf("8th of 10 at warn_at 0.75: %+v / %+v", r.Statuses[0], r.Statuses[1])
	}
}

// TestWarningOnCharge: a charge that takes a key to the level crosses it;
// one that adds to a key already in debt does not (the count, not the
// clamped remaining, says where it was).
func TestWarningOnCharge(t *testing.T) {
	e, c := newTestEngine(t, warned)
	c.ns.Store(time.Date(2025, 1, 10, 0, 0, 0, 0, time.UTC).UnixNano())
	charge := func(n int64) Status {
		t.Helper()
		r, err := e.Charge(context.Background(), Request{Descriptors: []Descriptor{desc("tenant=acme")}, Hits: n})
		if err != nil {
			t.Fatal(err)
		}
		return r.Statuses[0]
	}
	if st := charge(50); st.Warning || st.Used != 50 {
		t.Fatalf("50 of 100: %+v", st)
	}
	if st := charge(100); !st.CrossedWarning || st.Used != 150 {
		t.Fatalf("150 of 100: %+v, want crossed and used 150", st)
	}
	if st := charge(100); st.CrossedWarning || !st.Warning || st.Used != 250 {
		t.Fatalf("250 of 100: %+v, want in warning, not crossed", st)
	}
}

func flags(warning, crossed bool) string {
	s := ""
	if warning {
		s += "W"
	}
	if crossed {
		s += "C"
	}
	if s == "" {
		s = "-"
	}
	return s
}
