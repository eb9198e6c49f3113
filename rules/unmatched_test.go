package rules

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/syncbuf"
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
		label       string
	}{
		{Request{Domain: "default", Descriptors: []Descriptor{desc("path=/loan/x", "member=u1")}}, UnmatchedDomain, "", UnmatchedOther},
		{Request{Domain: "myapp", Descriptors: []Descriptor{desc("path=/other", "member=u1")}}, UnmatchedRules, "myapp", "myapp"},
		{Request{Descriptors: []Descriptor{desc("path=/loan/x")}}, UnmatchedRules, "myapp", "myapp"}, // no member to count by
		{Request{Descriptors: []Descriptor{desc("path=/loan/x", "member=u1")}}, "", "", ""},
	}
	for i, c := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			res := check(t, e, c.req)
			if res.Unmatched != c.why || res.Domain != c.domain || UnmatchedLabel(res) != c.label {
				t.Errorf("case %d: unmatched %q domain %q label %q, want %q %q %q", i, res.Unmatched, res.Domain, UnmatchedLabel(res), c.why, c.domain, c.label)
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

// The log counts every unmatched request by bounded label, writes at most
// one record per interval with an example and the count it stands for.
func TestUnmatchedLog(t *testing.T) {
	var buf bytes.Buffer
	u := NewUnmatchedLog(slog.New(slog.NewTextHandler(&buf, nil)), time.Minute)
	now := time.Unix(1000, 0)
	u.now = func() time.Time { return now }
	e, _ := newTestEngine(t, unmatchedRules)
	for i := range 100 {
		dom := "myapp"
		if i%2 == 0 {
			dom = "client-" + strings.Repeat("x", i) // unbounded values, one label
		}
		req := Request{Domain: dom, Descriptors: []Descriptor{desc("path=/nothing", "member=u1")}}
		if !u.Record(req, check(t, e, req), "path", "/nothing") {
			t.Fatal("Record: not unmatched")
		}
	}
	matched := Request{Descriptors: []Descriptor{desc("path=/loan/", "member=u1")}}
	if u.Record(matched, check(t, e, matched)) {
		t.Fatal("Record: a matched request counted as unmatched")
	}
	if got, want := u.Counts(), map[string]uint64{"other": 50, "myapp": 50}; !maps.Equal(got, want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	if n := strings.Count(buf.String(), "matched no rule"); n != 1 {
		t.Fatalf("%d records in one minute, want 1:\n%s", n, buf.String())
	}
	for _, want := range []string{"counted_as=other", "example=\"path=/nothing,member=u1\"", "no rule set has this domain", "unmatched_since_last_record=1", "path=/nothing"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("record lacks %q:\n%s", want, buf.String())
		}
	}
	now = now.Add(time.Minute)
	req := Request{Domain: "myapp", Descriptors: []Descriptor{desc("path=/x")}}
	u.Record(req, check(t, e, req))
	if !strings.Contains(buf.String(), "unmatched_since_last_record=100") || !strings.Contains(buf.String(), "no rule of the domain matches") {
		t.Fatalf("second record wrong:\n%s", buf.String())
	}
}

func TestFormatDescriptorsCutsValues(t *testing.T) {
	got := FormatDescriptors([]Descriptor{desc("a=1", "key="+strings.Repeat("s", 100)), desc("b=2")}, 8)
	if want := "a=1,key=ssssssss...; b=2"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// Many goroutines at once: every request is counted, one record is written.
func TestUnmatchedLogConcurrent(t *testing.T) {
	var buf syncbuf.Buffer
	u := NewUnmatchedLog(slog.New(slog.NewTextHandler(&buf, nil)), time.Minute)
	res := Result{Allowed: true, Unmatched: UnmatchedRules, Domain: "d"}
	req := Request{Descriptors: []Descriptor{desc("a=b")}}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				u.Record(req, res)
			}
		})
	}
	wg.Wait()
	if got := u.Counts()["d"]; got != 8000 {
		t.Fatalf("counted %d of 8000", got)
	}
	if n := strings.Count(buf.String(), "matched no rule"); n != 1 {
		t.Fatalf("%d records, want 1", n)
	}
}
