package rulelog

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/syncbuf"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
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

// newEngine returns an engine over the rules of text and a memory store.
func newEngine(t testing.TB, text string) *rules.Engine {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return rules.NewEngine(set, memstore.New(memstore.Options{}))
}

// desc builds a descriptor from "k=v" strings.
func desc(kv ...string) rules.Descriptor {
	d := make(rules.Descriptor, 0, len(kv))
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		d = append(d, rules.Entry{Key: k, Value: v})
	}
	return d
}

func check(t testing.TB, e *rules.Engine, req rules.Request) rules.Result {
	t.Helper()
	r, err := e.Check(context.Background(), req)
	if err != nil {
		t.Fatalf("Check(%v): %v", req, err)
	}
	return r
}

// label is the domain an unmatched request was checked in, other for an
// unknown domain, and "" for a request some rule applied to.
func TestLabel(t *testing.T) {
	e := newEngine(t, unmatchedRules)
	for i, c := range []struct {
		req   rules.Request
		label string
	}{
		{rules.Request{Domain: "default", Descriptors: []rules.Descriptor{desc("path=/loan/x", "member=u1")}}, other},
		{rules.Request{Domain: "myapp", Descriptors: []rules.Descriptor{desc("path=/other", "member=u1")}}, "myapp"},
		{rules.Request{Descriptors: []rules.Descriptor{desc("path=/loan/x", "member=u1")}}, ""},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if got := label(check(t, e, c.req)); got != c.label {
				t.Errorf("label %q, want %q", got, c.label)
			}
		})
	}
}

// The log counts every unmatched request by bounded label, writes at most
// one record per interval with an example and the count it stands for.
func TestUnmatched(t *testing.T) {
	var buf bytes.Buffer
	u := NewUnmatched(slog.New(slog.NewTextHandler(&buf, nil)), time.Minute)
	now := time.Unix(1000, 0)
	u.now = func() time.Time { return now }
	e := newEngine(t, unmatchedRules)
	for i := range 100 {
		dom := "myapp"
		if i%2 == 0 {
			dom = "client-" + strings.Repeat("x", i) // unbounded values, one label
		}
		req := rules.Request{Domain: dom, Descriptors: []rules.Descriptor{desc("path=/nothing", "member=u1")}}
		if !u.Record(req, check(t, e, req), "path", "/nothing") {
			t.Fatal("Record: not unmatched")
		}
	}
	matched := rules.Request{Descriptors: []rules.Descriptor{desc("path=/loan/", "member=u1")}}
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
	req := rules.Request{Domain: "myapp", Descriptors: []rules.Descriptor{desc("path=/x")}}
	u.Record(req, check(t, e, req))
	if !strings.Contains(buf.String(), "unmatched_since_last_record=100") || !strings.Contains(buf.String(), "no rule of the domain matches") {
		t.Fatalf("second record wrong:\n%s", buf.String())
	}
}

func TestFormatDescriptorsCutsValues(t *testing.T) {
	got := formatDescriptors([]rules.Descriptor{desc("a=1", "key="+strings.Repeat("s", 100)), desc("b=2")}, 8)
	if want := "a=1,key=ssssssss...; b=2"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// Many goroutines at once: every request is counted, one record is written.
func TestUnmatchedConcurrent(t *testing.T) {
	var buf syncbuf.Buffer
	u := NewUnmatched(slog.New(slog.NewTextHandler(&buf, nil)), time.Minute)
	res := rules.Result{Allowed: true, Unmatched: rules.UnmatchedRules, Domain: "d"}
	req := rules.Request{Descriptors: []rules.Descriptor{desc("a=b")}}
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
