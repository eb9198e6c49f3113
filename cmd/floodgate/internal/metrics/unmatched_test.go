package metrics

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/rules"
)

// Unmatched requests are counted by a bounded domain label: the rule set's
// domain, or "other" for domains no rule set has, however many distinct
// domains clients send.
func TestUnmatchedByDomain(t *testing.T) {
	set, err := rules.Parse("r.yaml", []byte("domain: shop\nrules:\n  - name: r\n    match: {client: \"*\"}\n    count_by: [client]\n    limit: 5\n    window: 1m\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := rules.NewEngine(set, nil)
	r := New()
	check := func(domain, key string) {
		res, err := e.Check(context.Background(), rules.Request{Domain: domain, Descriptors: []rules.Descriptor{{{Key: key, Value: "v"}}}})
		if err != nil {
			t.Fatal(err)
		}
		r.Observe(res, time.Microsecond)
	}
	for i := range 100 {
		check(fmt.Sprintf("typo-%d", i), "client") // 100 distinct unknown domains
	}
	for range 3 {
		check("shop", "path") // no rule matches
	}
	check("shop", "client") // matched
	m := scrape(t, r)
	if m[`floodgate_unmatched_requests_total{domain="other"}`] != 100 || m[`floodgate_unmatched_requests_total{domain="shop"}`] != 3 {
		t.Fatalf("unmatched counters: other %v shop %v", m[`floodgate_unmatched_requests_total{domain="other"}`], m[`floodgate_unmatched_requests_total{domain="shop"}`])
	}
	n := 0
	for k := range m {
		if len(k) > 34 && k[:34] == "floodgate_unmatched_requests_total" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d unmatched series, want 2 (bounded labels)", n)
	}
	snap := r.Snapshot()
	want := []UnmatchedStats{{Domain: "other", Reason: rules.UnmatchedDomain, Count: 100}, {Domain: "shop", Reason: rules.UnmatchedRules, Count: 3}}
	if fmt.Sprint(snap.Requests.ByDomain) != fmt.Sprint(want) || snap.Requests.Unmatched != 103 {
		t.Errorf("snapshot: %+v, unmatched %d", snap.Requests.ByDomain, snap.Requests.Unmatched)
	}
}
