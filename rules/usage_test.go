package rules

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/store"
)

const usageRules = `
domain: llm
rules:
  - name: monthly
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 1000
    calendar: {period: month, zone: America/New_York}
    warn_at: 0.8
  - name: daily
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 100
    window: 24h
    algorithm: fixed-window
  - name: per-minute
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 50
    window: 1m
  - name: bucket
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 40
    window: 1m
    algorithm: token-bucket
`

// TestUsage: Usage reports every applicable rule's used, remaining, limit,
// period end and warning state, counts nothing (a check after any number
// of usage calls sees what it would have seen without them), ignores hits,
// and reports a key that charges overspent as used past its limit. On the
// memory store and on a real Redis.
func TestUsage(t *testing.T) {
	t.Run("memory", func(t *testing.T) { checkUsage(t, memstore.New(memstore.Options{})) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr()}, ClientTime: true, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		checkUsage(t, rs)
	})
}

func checkUsage(t *testing.T, st store.Store) {
	c := newClock()
	ny, _ := time.LoadLocation("America/New_York")
	c.ns.Store(time.Date(2025, 3, 31, 12, 0, 0, 0, ny).UnixNano())
	e := NewEngine(mustParse(t, usageRules), st, WithClock(c.now))
	ctx := context.Background()
	acme := Request{Descriptors: []Descriptor{desc("tenant=" + t.Name())}}
	usage := func() map[string]Status {
		t.Helper()
		r, err := e.Usage(ctx, Request{Descriptors: acme.Descriptors, Hits: 5000})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]Status{}
		for _, s := range r.Statuses {
			if s.CrossedWarning {
				t.Fatalf("usage crossed a warning: %+v", s)
			}
			out[s.Rule] = s
		}
		if len(out) != 4 {
			t.Fatalf("usage statuses %+v, want 4 rules", r.Statuses)
		}
		return out
	}
	if u := usage(); u["monthly"].Used != 0 || u["monthly"].Decision.Remaining != 1000 || u["bucket"].Decision.Remaining != 40 {
		t.Fatalf("fresh key: %+v", u)
	}
	if r := check(t, e, Request{Descriptors: acme.Descriptors, Hits: 30}); !r.Allowed {
		t.Fatalf("30 of 40: %+v", r)
	}
	monthEnd := time.Date(2025, 4, 1, 0, 0, 0, 0, ny)
	for range 3 {
		u := usage()
		for rule, want := range map[string][2]int64{"monthly": {1000, 30}, "daily": {100, 30}, "per-minute": {50, 30}, "bucket": {40, 30}} {
			s := u[rule]
			if s.Decision.Limit != want[0] || s.Used != want[1] || s.Decision.Remaining != want[0]-want[1] || s.Warning || !s.Decision.Allowed {
				t.Fatalf("%s: limit %d used %d remaining %d warning %v allowed %v; want %d, %d, %d, false, true",
					rule, s.Decision.Limit, s.Used, s.Decision.Remaining, s.Warning, s.Decision.Allowed, want[0], want[1], want[0]-want[1])
			}
		}
		if m := u["monthly"]; !m.PeriodEnd.Equal(monthEnd) || m.Decision.ResetAfter != monthEnd.Sub(c.now()) || m.Calendar == "" {
			t.Fatalf("monthly: period end %v, reset after %v; want %v, %v", m.PeriodEnd, m.Decision.ResetAfter, monthEnd, monthEnd.Sub(c.now()))
		}
		if d := u["daily"]; d.PeriodEnd.IsZero() || d.PeriodEnd.Sub(c.now()) != d.Decision.ResetAfter {
			t.Fatalf("daily: period end %v, reset after %v", d.PeriodEnd, d.Decision.ResetAfter)
		}
		if !u["per-minute"].PeriodEnd.IsZero() || !u["bucket"].PeriodEnd.IsZero() {
			t.Fatal("a rolling window reported a period end")
		}
	}
	// Counting nothing: 10 more fit the bucket of 40 after 30, not fewer.
	if r := check(t, e, Request{Descriptors: acme.Descriptors, Hits: 10}); !r.Allowed {
		t.Fatalf("usage calls counted: 10 more of 40 rejected: %+v", r.Statuses)
	}
	// A charge past the limits: used goes past them, the warning is on.
	if _, err := e.Charge(ctx, Request{Descriptors: acme.Descriptors, Hits: 800}); err != nil {
		t.Fatal(err)
	}
	u := usage()
	if m := u["monthly"]; m.Used != 840 || m.Decision.Remaining != 160 || !m.Warning {
		t.Fatalf("monthly after a charge of 800: used %d remaining %d warning %v; want 840, 160, true", m.Used, m.Decision.Remaining, m.Warning)
	}
	for _, rule := range []string{"daily", "per-minute"} {
		if s := u[rule]; s.Used != 840 || s.Decision.Remaining != 0 || s.Decision.Allowed {
			t.Fatalf("%s after a charge of 800: used %d remaining %d allowed %v; want 840, 0, false", rule, s.Used, s.Decision.Remaining, s.Decision.Allowed)
		}
	}
	if r, err := e.Usage(ctx, Request{Descriptors: []Descriptor{desc("user=x")}}); err != nil || r.Unmatched == "" || len(r.Statuses) != 0 {
		t.Fatalf("no rule applies: %+v, %v", r, err)
	}
}
