package rules

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/memstore"
)

func copyFixture(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A directory of files, one domain each, as envoyproxy/ratelimit reads its
// configuration.
func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	copyFixture(t, "testdata/envoy/edge.yaml", filepath.Join(dir, "a-edge.yaml"))
	copyFixture(t, "testdata/envoy/nested.yaml", filepath.Join(dir, "b-mail.yml"))
	os.WriteFile(filepath.Join(dir, "c-shop.yaml"), []byte("domain: shop\nshadow: true\n"+composed[strings.Index(composed, "rules:"):]), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a rule file"), 0o644)
	os.WriteFile(filepath.Join(dir, ".hidden.yaml"), []byte("junk: ["), 0o644)
	os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755)

	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Domains(); !slices.Equal(got, []string{"edge", "mail", "shop"}) {
		t.Fatalf("domains %v", got)
	}
	if s.Len() != 3+5+2 || len(s.Rules()) != s.Len() {
		t.Fatalf("Len %d, Rules %d", s.Len(), len(s.Rules()))
	}
	e := NewEngine(s, memstore.New(memstore.Options{}), WithClock(newClock().now))
	// No domain: the first file's.
	if r := check(t, e, one("remote_address=203.0.113.9")); r.Allowed || r.Statuses[0].Rule != "remote_address=203.0.113.9" {
		t.Fatalf("default domain: %+v", r)
	}
	mail := Request{Domain: "mail", Descriptors: []Descriptor{desc("kind=campaign", "recipient=1")}}
	if got := allowedCount(t, e, mail, 5); got != 3 {
		t.Fatalf("mail domain: %d of 5, want 3", got)
	}
	// The shop file's shadow switch covers its own rules only.
	shop := Request{Domain: "shop", Descriptors: []Descriptor{desc("member=u1")}}
	if got := allowedCount(t, e, shop, 10); got != 10 {
		t.Fatalf("shadow file rejected: %d of 10 allowed", got)
	}
	if r := check(t, e, shop); len(r.Rejected) != 2 || !r.Statuses[0].Shadow {
		t.Fatalf("shop: %+v", r)
	}
	if r := check(t, e, Request{Domain: "nope", Descriptors: mail.Descriptors}); len(r.Statuses) != 0 {
		t.Fatalf("unknown domain matched: %+v", r)
	}
	for _, info := range s.Rules() {
		if info.Domain == "edge" && info.Shadow {
			t.Fatalf("edge rule in shadow: %+v", info)
		}
	}
}

func TestLoadDirectoryErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "no .yaml or .yml rule files") {
		t.Fatalf("empty directory: %v", err)
	}
	copyFixture(t, "testdata/envoy/edge.yaml", filepath.Join(dir, "one.yaml"))
	copyFixture(t, "testdata/envoy/edge.yaml", filepath.Join(dir, "two.yaml"))
	os.WriteFile(filepath.Join(dir, "three.yaml"), []byte("domain: x\nrules:\n  - name: r\n"), 0o644)
	_, err := Load(dir)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		filepath.Join(dir, "two.yaml") + `:1: domain "edge" is also defined in ` + filepath.Join(dir, "one.yaml"),
		filepath.Join(dir, "three.yaml") + ":3: rule \"r\": count_by is missing",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
