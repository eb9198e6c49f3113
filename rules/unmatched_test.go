package rules

import (
	"fmt"
	"testing"
)

const unmatchedRules = `
domain: myapp
rules:
  - name: per-member
    match: {path: {prefix: /loan/}}
    count_by: [member]
    limit: 5
    window: 1m
`

// A request no rule applies to says why: an unknown domain, or no rule of
// its domain matching; one some rule applies to says nothing.
func TestCheckReportsUnmatched(t *testing.T) {
	e, _ := newTestEngine(t, unmatchedRules)
	cases := []struct {
		req         Request
		why, domain string
	}{
		{Request{Domain: "default", Descriptors: []Descriptor{desc("path=/loan/x", "member=u1")}}, UnmatchedDomain, ""},
		{Request{Domain: "myapp", Descriptors: []Descriptor{desc("path=/other", "member=u1")}}, UnmatchedRules, "myapp"},
		{Request{Descriptors: []Descriptor{desc("path=/loan/x")}}, UnmatchedRules, "myapp"}, // no member to count by
		{Request{Descriptors: []Descriptor{desc("path=/loan/x", "member=u1")}}, "", ""},
	}
	for i, c := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			res := check(t, e, c.req)
			if res.Unmatched != c.why || res.Domain != c.domain {
				t.Errorf("case %d: unmatched %q domain %q, want %q %q", i, res.Unmatched, res.Domain, c.why, c.domain)
			}
			if !res.Allowed {
				t.Errorf("case %d: rejected", i)
			}
		})
	}
}

// Every domain of a directory counts as known; others are "other".
func TestUnmatchedDomainsOfDirectory(t *testing.T) {
	s := mustParse(t, unmatchedRules)
	s.more = []*Set{mustParse(t, "domain: shop\nrules:\n  - name: r\n    limit: 1\n    window: 1s\n    match: {k: v}\n    count_by: global\n")}
	for _, c := range [][3]string{{"shop", "shop", UnmatchedRules}, {"", "myapp", UnmatchedRules}, {"nope", "", UnmatchedDomain}} {
		if d, why := s.unmatched(c[0]); d != c[1] || why != c[2] {
			t.Errorf("unmatched(%q) = %q %q, want %q %q", c[0], d, why, c[1], c[2])
		}
	}
}
