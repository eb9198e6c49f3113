package rules

import (
	"context"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

// counterSpy is a memory store that records the Counter of every limit it
// decides.
type counterSpy struct {
	*memstore.Store
	counters map[string]bool
}

func (s *counterSpy) Decide(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) error {
	for _, r := range reqs {
		s.counters[r.Algorithm.Config().Counter] = true
	}
	return s.Store.Decide(ctx, now, reqs, out)
}

// TestHashTagParsed: a rule's hash_tag puts {tag} before the rule's name
// in its limits' Counter (which a Redis store keeps in one Cluster slot per
// tag); a rule without one counts under its name; a tag that is no plain
// name is an error that says what it may hold.
func TestHashTagParsed(t *testing.T) {
	set := mustParse(t, `
domain: d
rules:
  - name: org
    match: {org: "*"}
    count_by: [org]
    limit: 100
    window: 1h
    hash_tag: budgets
  - name: user
    match: {user: "*"}
    count_by: [user]
    limit: 10
    window: 1h
`)
	spy := &counterSpy{Store: memstore.New(memstore.Options{}), counters: map[string]bool{}}
	e := NewEngine(set, spy)
	if _, err := e.Check(context.Background(), Request{Descriptors: []Descriptor{desc("org=acme"), desc("user=u1")}}); err != nil {
		t.Fatal(err)
	}
	if !spy.counters["{budgets}org"] || !spy.counters["user"] || len(spy.counters) != 2 {
		t.Fatalf("counters %v, want {budgets}org and user", spy.counters)
	}
	for _, tag := range []string{`"a b"`, `"{x}"`, `""`, "[x]"} {
		text := "domain: d\nrules:\n  - name: r\n    match: {k: \"*\"}\n    count_by: [k]\n    limit: 10\n    window: 1m\n    hash_tag: " + tag + "\n"
		_, err := Parse("r.yaml", []byte(text))
		if err == nil || !strings.Contains(err.Error(), "hash_tag") {
			t.Errorf("hash_tag: %s: error %v, want one about hash_tag", tag, err)
		}
	}
}
