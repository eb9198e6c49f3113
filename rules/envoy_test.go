package rules

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/floodgate-dev/floodgate/memstore"
)

func loadFixture(t *testing.T, name string) *Set {
	t.Helper()
	s, err := Load("testdata/envoy/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if s.Format() != formatEnvoy {
		t.Fatalf("%s: format %s", name, s.Format())
	}
	return s
}

func envoyEngine(t *testing.T, name string) *Engine {
	c := newClock()
	return NewEngine(loadFixture(t, name), memstore.New(memstore.Options{}), WithClock(c.now))
}

// applies returns the names of the rules that apply to each descriptor.
func applies(t *testing.T, s *Set, ds ...Descriptor) []string {
	t.Helper()
	ks, err := s.Keys(Request{Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range ks {
		names = append(names, k.Rule)
	}
	return names
}

func TestEnvoyKeyValueBeforeKeyOnly(t *testing.T) {
	s := loadFixture(t, "edge.yaml")
	if got := applies(t, s, desc("remote_address=198.51.100.1")); !slices.Equal(got, []string{"remote_address"}) {
		t.Fatalf("generic address: %v", got)
	}
	if got := applies(t, s, desc("remote_address=203.0.113.9")); !slices.Equal(got, []string{"remote_address=203.0.113.9"}) {
		t.Fatalf("blocked address: %v", got)
	}
	e := envoyEngine(t, "edge.yaml")
	if got := allowedCount(t, e, one("remote_address=198.51.100.1"), 8); got != 5 {
		t.Errorf("generic address: %d of 8 allowed, want 5", got)
	}
	// Each address has its own counter.
	if got := allowedCount(t, e, one("remote_address=198.51.100.2"), 8); got != 5 {
		t.Errorf("second address: %d of 8 allowed, want 5", got)
	}
	if got := allowedCount(t, e, one("remote_address=203.0.113.9"), 3); got != 0 {
		t.Errorf("requests_per_unit 0: %d allowed, want 0", got)
	}
	if got := allowedCount(t, e, one("remote_address=10.0.0.1"), 50); got != 50 {
		t.Errorf("unlimited: %d of 50 allowed", got)
	}
	if r := check(t, e, one("remote_address=10.0.0.1")); !r.Unlimited {
		t.Errorf("unlimited result not marked: %+v", r)
	}
}

func TestEnvoyDeepestMatchAndDepth(t *testing.T) {
	s := loadFixture(t, "nested.yaml")
	for _, c := range []struct {
		d    Descriptor
		want []string
	}{
		// The nested limit applies to the two-entry descriptor ...
		{desc("kind=campaign", "recipient=555"), []string{"kind=campaign>recipient"}},
		// ... and the one-entry descriptor reaches only the top-level limit.
		{desc("recipient=555"), []string{"recipient"}},
		// The placeholder level has no limit of its own.
		{desc("kind=campaign"), nil},
		// Depth must match: a longer descriptor than the tree matches nothing.
		{desc("recipient=555", "extra=1"), nil},
		{desc("kind=transactional", "recipient=555"), nil},
		// Exact before wildcard before key-only.
		{desc("path=/api/v2/export"), []string{"path=/api/v2/export"}},
		{desc("path=/api/v2/users"), []string{"path=/api/v2/*"}},
		{desc("path=/api/v1/users"), []string{"path"}},
		// A value listed without a rate_limit is exempt (whitelisted).
		{desc("path=/healthz"), nil},
	} {
		t.Run(fmt.Sprint(c.d), func(t *testing.T) {
			if got := applies(t, s, c.d); !slices.Equal(got, c.want) {
				t.Errorf("%v: %v, want %v", c.d, got, c.want)
			}
		})
	}
	// Envoy sends both descriptors in one request: both limits apply.
	got := applies(t, s, desc("kind=campaign", "recipient=555"), desc("recipient=555"))
	if !slices.Equal(got, []string{"kind=campaign>recipient", "recipient"}) {
		t.Errorf("two descriptors: %v", got)
	}
	// Wildcard values count per actual value.
	e := NewEngine(s, memstore.New(memstore.Options{}), WithClock(newClock().now))
	if got := allowedCount(t, e, one("path=/api/v2/a"), 6); got != 4 {
		t.Errorf("/api/v2/a: %d of 6, want 4", got)
	}
	if got := allowedCount(t, e, one("path=/api/v2/b"), 6); got != 4 {
		t.Errorf("/api/v2/b: %d of 6, want 4", got)
	}
}

func TestEnvoyReplaces(t *testing.T) {
	s := loadFixture(t, "replaces.yaml")
	read := desc("category=read", "user=bob")
	report := desc("endpoint=daily-report", "user=bob")
	if got := applies(t, s, read); !slices.Equal(got, []string{"read-per-user"}) {
		t.Fatalf("read alone: %v", got)
	}
	if got := applies(t, s, read, report); !slices.Equal(got, []string{"endpoint=daily-report>user"}) {
		t.Fatalf("read and report: %v, want the replacing limit only", got)
	}
	e := NewEngine(s, memstore.New(memstore.Options{}), WithClock(newClock().now))
	both := Request{Descriptors: []Descriptor{read, report}}
	if got := allowedCount(t, e, both, 10); got != 6 {
		t.Errorf("replaced: %d of 10 allowed, want 6", got)
	}
	// The replaced limit's counter was not touched by those requests.
	if got := allowedCount(t, e, Request{Descriptors: []Descriptor{read}}, 5); got != 2 {
		t.Errorf("read limit after replaced requests: %d of 5, want 2", got)
	}
}

func TestEnvoyShadowMode(t *testing.T) {
	e := envoyEngine(t, "shadow.yaml")
	newT := one("service=search", "tenant=t-new")
	for i := 0; i < 5; i++ {
		r := check(t, e, newT)
		if !r.Allowed {
			t.Fatalf("shadow_mode rejected request %d", i)
		}
		if i > 0 && (len(r.Rejected) != 1 || !r.Statuses[0].Shadow) {
			t.Fatalf("request %d: rejection not reported: %+v", i, r)
		}
	}
	if got := allowedCount(t, e, one("service=search", "tenant=t-old"), 4); got != 2 {
		t.Errorf("enforced tenant: %d of 4, want 2", got)
	}
}

func TestEnvoyFixturesRoundTrip(t *testing.T) {
	ents, err := os.ReadDir("testdata/envoy")
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		s := loadFixture(t, ent.Name())
		if s.Len() == 0 || len(s.Rules()) != s.Len() {
			t.Errorf("%s: %d rules", ent.Name(), s.Len())
		}
	}
}

// TestEnvoyDocumentedFields loads every field envoyproxy/ratelimit's README
// documents and holds the ones that change decisions to their meaning.
func TestEnvoyDocumentedFields(t *testing.T) {
	const text = `
domain: d
descriptors:
  - key: empty
    descriptors:
  - key: k
    value: "/api/*/action"
    detailed_metric: true
    value_to_metric: true
    metadata: {owner: edge, tags: [a, b]}
    rate_limit: {name: action, unit: minute, requests_per_unit: 2}
  - key: files
    value: "f*"
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 3}
`
	s, err := Parse("d.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		desc  Descriptor
		rules []string
	}{
		{"wildcard in the middle", desc("k=/api/v2/action"), []string{"action"}},
		{"wildcard does not match", desc("k=/api/v2/other"), nil},
		{"empty descriptors list", desc("empty=x"), nil},
		{"share_threshold below", desc("files=fa", "user=u"), []string{"files=f*>user"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := applies(t, s, tc.desc); !slices.Equal(got, tc.rules) {
				t.Fatalf("rules %v, want %v", got, tc.rules)
			}
		})
	}
	a, _ := s.Keys(Request{Domain: "d", Descriptors: []Descriptor{desc("files=fa", "user=u")}})
	b, _ := s.Keys(Request{Domain: "d", Descriptors: []Descriptor{desc("files=fb", "user=u")}})
	c, _ := s.Keys(Request{Domain: "d", Descriptors: []Descriptor{desc("files=fb", "user=v")}})
	if len(a) != 1 || len(b) != 1 || len(c) != 1 || a[0].Key != b[0].Key || b[0].Key == c[0].Key {
		t.Fatalf("share_threshold keys %v %v %v: values matching the pattern share a counter, other entries still count apart", a, b, c)
	}
	for _, ri := range s.Rules() {
		if ri.Name == "files=f*>user" && !slices.Equal(ri.CountBy, []string{"user"}) {
			t.Errorf("count_by %v, want [user]: the shared entry adds no buckets", ri.CountBy)
		}
	}
}
