package rules

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

const leasedRules = `
domain: api
rules:
  - name: per-tenant
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 100
    window: 1m
    leases: {ttl: 5s, holders: 4}
    failure: closed
  - name: plain
    match: {plan: "*"}
    count_by: [plan]
    limit: 10
    window: 1m
  - name: everyone
    match: {user: "*"}
    unlimited: true
`

func TestEngineHold(t *testing.T) {
	e, _ := newTestEngine(t, leasedRules)
	ctx := context.Background()
	req := Request{Domain: "api", Descriptors: []Descriptor{desc("tenant=acme", "user=u1")}}
	id := lease.New()
	res, held, err := e.Hold(ctx, req, 1, lease.Op{ID: id, Seq: 1, Target: 30})
	if err != nil {
		t.Fatal(err)
	}
	if res.NoLease != "" || !res.Allowed || held.Granted != 30 || held.TTL != 5*time.Second {
		t.Fatalf("first hold: %+v %+v", res, held)
	}
	if st := res.Statuses[res.Tightest]; st.Rule != "per-tenant" || st.Decision.Remaining != 69 || st.Failure != store.FailClosed {
		t.Fatalf("status: %+v", st)
	}
	// A plain request of the key counts the held units as taken.
	r, err := e.Check(ctx, Request{Domain: "api", Descriptors: []Descriptor{desc("tenant=acme")}, Hits: 70})
	if err != nil || r.Allowed {
		t.Fatalf("70 more beside 1 counted and 30 held: %+v, %v", r, err)
	}
	// Spent and given back: only what was spent stays counted.
	if res, held, err = e.Hold(ctx, req, 0, lease.Op{ID: id, Seq: 2, Spent: 10, Target: 0}); err != nil || held.Units != 0 {
		t.Fatalf("release: %+v %+v, %v", res, held, err)
	}
	r, err = e.Check(ctx, Request{Domain: "api", Descriptors: []Descriptor{desc("tenant=acme")}, Hits: 89})
	if err != nil || !r.Allowed {
		t.Fatalf("89 beside 11 counted: %+v, %v", r, err)
	}
}

func TestEngineHoldNotLeasable(t *testing.T) {
	e, _ := newTestEngine(t, leasedRules)
	ctx := context.Background()
	for _, c := range []struct {
		d   Descriptor
		why string
	}{
		{desc("plan=pro"), noLeaseRule},
		{desc("tenant=acme", "plan=pro"), noLeaseSeveral},
		{desc("user=u1"), noLeaseUnmatched},
		{desc("other=x"), noLeaseUnmatched},
	} {
		req := Request{Domain: "api", Descriptors: []Descriptor{c.d}}
		res, held, err := e.Hold(ctx, req, 1, lease.Op{ID: lease.New(), Seq: 1, Target: 5})
		if err != nil {
			t.Fatal(err)
		}
		if res.NoLease != c.why || !res.Allowed || held.Units != 0 {
			t.Fatalf("%v: %+v, want not leasable because %q, decided by Check", c.d, res, c.why)
		}
	}
	// The request without a lease was still decided and counted.
	r, _ := e.Check(context.Background(), Request{Domain: "api", Descriptors: []Descriptor{desc("plan=pro")}, Hits: 9})
	if r.Allowed {
		t.Fatalf("the plan's count missed the requests Hold decided: %+v", r)
	}
}

func TestLeasesField(t *testing.T) {
	for _, c := range []struct{ field, err string }{
		{"leases: true", ""},
		{"leases: false", ""},
		{"leases: {ttl: 2s}", ""},
		{"leases: {holders: 1025}", "holders"},
		{"leases: {ttl: 0s}", "ttl must be above 0"},
		{"leases: {size: 3}", "size"},
		{"leases: true\n    algorithm: gcra", "bounded-log, sliding-log or fixed-window"},
	} {
		_, err := Parse("t.yaml", []byte("domain: d\nrules:\n  - name: r\n    match: {k: \"*\"}\n    count_by: [k]\n    limit: 5\n    window: 1s\n    "+c.field+"\n"))
		if c.err == "" && err != nil {
			t.Errorf("%s: %v", c.field, err)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: got %v, want an error about %q", c.field, err, c.err)
		}
	}
}
