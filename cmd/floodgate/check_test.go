package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCheckCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := dispatch(append([]string{"check"}, args...), &out, &errOut)
	return out.String(), errOut.String(), err
}

func checkJSON(t *testing.T, args ...string) checkDoc {
	t.Helper()
	out, errOut, err := runCheckCmd(t, append(args, "--json")...)
	if err != nil {
		t.Fatalf("check %v: %v\n%s%s", args, err, out, errOut)
	}
	var doc checkDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("JSON: %v\n%s", err, out)
	}
	return doc
}

func ruleByName(t *testing.T, doc checkDoc, name string) checkRule {
	t.Helper()
	for _, r := range doc.Rules {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no rule %q in %+v", name, doc.Rules)
	return checkRule{}
}

// The effective cap is limit × buckets, from --cardinality: "20 per member"
// is 100,000 per window at 5000 members.
func TestCheckEffectiveCapFromCardinality(t *testing.T) {
	doc := checkJSON(t, "../../examples/rules.yaml", "--cardinality", "member=5000", "--cardinality", "ip=100,tenant=7")
	if !doc.Valid || doc.Domain != "lending" || doc.Format != "floodgate" {
		t.Fatalf("doc: %+v", doc)
	}
	m := ruleByName(t, doc, "per-member")
	if m.Buckets == nil || *m.Buckets != 5000 || m.Cap == nil || *m.Cap != 100000 || m.BucketsFrom != "cardinality" {
		t.Fatalf("per-member: %+v", m)
	}
	g := ruleByName(t, doc, "loan-service")
	if *g.Buckets != 1 || *g.Cap != 3000 || g.BucketsFrom != "global" {
		t.Fatalf("global rule: %+v", g)
	}
	// Two keys multiply; a key without cardinality leaves the cap unknown.
	s := ruleByName(t, doc, "search-trial")
	if s.Cap != nil || strings.Join(s.Missing, ",") != "client" {
		t.Fatalf("search-trial: %+v", s)
	}
	doc = checkJSON(t, "../../examples/rules.yaml", "--cardinality", "client=3,member=5000")
	if s := ruleByName(t, doc, "search-trial"); *s.Buckets != 15000 || *s.Cap != 75000 {
		t.Fatalf("client×member: %+v", s)
	}
}

// Counted from a trace, the gateway example's stream makes 5 member buckets: cap 100.
func TestCheckBucketsFromTrace(t *testing.T) {
	doc := checkJSON(t, "../../examples/gateway-prefix.yaml", "--trace", "../../examples/gateway-trace.csv")
	r := ruleByName(t, doc, "loan-per-member")
	if doc.Requests != 70 || *r.Buckets != 5 || *r.Cap != 100 || r.BucketsFrom != "trace" {
		t.Fatalf("trace: requests %d, rule %+v", doc.Requests, r)
	}
	// Overrides count: each traced bucket contributes its own limit.
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.csv")
	os.WriteFile(tr, []byte("header:x-api-key,plan\nk1,free\nk2,pro\nk2,pro\nkey-internal-batch,\n"), 0o644)
	doc = checkJSON(t, "../../examples/rules.yaml", "--trace", tr)
	a := ruleByName(t, doc, "api-key")
	if *a.Buckets != 3 || a.Cap != nil {
		t.Fatalf("api-key with an unlimited bucket: %+v", a)
	}
	os.WriteFile(tr, []byte("header:x-api-key,plan\nk1,free\nk2,pro\n"), 0o644)
	doc = checkJSON(t, "../../examples/rules.yaml", "--trace", tr)
	if a := ruleByName(t, doc, "api-key"); *a.Buckets != 2 || *a.Cap != 660 {
		t.Fatalf("api-key free+pro: %+v, want cap 60+600", a)
	}
}

// The gateway example: the prefix /loan/ misses /loan-bulk/list; --strict fails.
func TestCheckRoutes(t *testing.T) {
	args := []string{"../../examples/gateway-prefix.yaml", "--routes", "../../examples/gateway-routes.txt"}
	doc := checkJSON(t, args...)
	if strings.Join(doc.Uncovered, ";") != "GET /loan-bulk/list;GET /catalog/search" {
		t.Fatalf("uncovered: %v", doc.Uncovered)
	}
	if len(doc.Routes) != 4 || strings.Join(doc.Routes[0].Rules, ",") != "loan-per-member" {
		t.Fatalf("routes: %+v", doc.Routes)
	}
	out, _, err := runCheckCmd(t, args...)
	if err != nil {
		t.Fatalf("without --strict: %v", err)
	}
	if !strings.Contains(out, "/loan-bulk/list  NOT COVERED by any rule") {
		t.Fatalf("text output:\n%s", out)
	}
	_, _, err = runCheckCmd(t, append(args, "--strict")...)
	var exit exitError
	if !errors.As(err, &exit) || exit.code != 1 {
		t.Fatalf("--strict with uncovered routes: %v, want exit status 1", err)
	}
	// The realistic file covers every route: --strict passes.
	if _, _, err := runCheckCmd(t, "../../examples/rules.yaml", "--routes", "../../examples/routes.txt", "--strict"); err != nil {
		t.Fatalf("examples/rules.yaml --strict: %v", err)
	}
}

func TestCheckInvalidFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(p, []byte("domain: a\nrules:\n  - name: x\n    count_by: [member]\n    limit: 20\n    window: 1 minute\n"), 0o644)
	_, errOut, err := runCheckCmd(t, p)
	var exit exitError
	if !errors.As(err, &exit) || exit.code != 1 {
		t.Fatalf("invalid file: %v", err)
	}
	if !strings.Contains(errOut, p+":6: rule \"x\": window \"1 minute\" is not a duration") {
		t.Fatalf("stderr:\n%s", errOut)
	}
	out, _, _ := runCheckCmd(t, p, "--json")
	var doc checkDoc
	if json.Unmarshal([]byte(out), &doc); doc.Valid || len(doc.Errors) != 1 {
		t.Fatalf("JSON for an invalid file: %s", out)
	}
}

func TestCheckEnvoyFile(t *testing.T) {
	doc := checkJSON(t, "--cardinality", "recipient=1000", "../../rules/testdata/envoy/nested.yaml")
	if doc.Format != "envoy-ratelimit" {
		t.Fatalf("format %s", doc.Format)
	}
	if r := ruleByName(t, doc, "kind=campaign>recipient"); *r.Cap != 3000 {
		t.Fatalf("nested: %+v", r)
	}
	if r := ruleByName(t, doc, "path=/api/v2/export"); *r.Buckets != 1 {
		t.Fatalf("exact-valued path is one bucket: %+v", r)
	}
}

func TestCheckBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"../../examples/rules.yaml", "--cardinality", "member"},
		{"../../examples/rules.yaml", "--cardinality", "member=0"},
		{"../../examples/rules.yaml", "--routes", "/no/such/file"},
		{"../../examples/rules.yaml", "--trace", "/no/such/file"},
		{"../../examples/rules.yaml", "extra"},
		{"/no/such/rules.yaml"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if _, _, err := runCheckCmd(t, args...); err == nil {
				t.Errorf("check %v: no error", args)
			}
		})
	}
	p := filepath.Join(t.TempDir(), "routes.txt")
	os.WriteFile(p, []byte("GET loan/list\n"), 0o644)
	if _, _, err := runCheckCmd(t, "../../examples/rules.yaml", "--routes", p); err == nil || !strings.Contains(err.Error(), ":1: want a path") {
		t.Errorf("bad route line: %v", err)
	}
}

func TestCheckTextOutput(t *testing.T) {
	out, _, err := runCheckCmd(t, "../../examples/rules.yaml", "--cardinality", "member=5000")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"RULE", "EFFECTIVE CAP", "per-member", "100000 / 1m", "25000 × buckets(client)", "shadow (reports, never rejects)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestCheckDirectory(t *testing.T) {
	doc := checkJSON(t, "../../rules/testdata/envoy")
	if strings.Join(doc.Domains, ",") != "edge,mail,reports,launch" || len(doc.Rules) != 12 {
		t.Fatalf("domains %v, %d rules", doc.Domains, len(doc.Rules))
	}
	out, _, err := runCheckCmd(t, "../../rules/testdata/envoy")
	if err != nil || !strings.Contains(out, "mail/kind=campaign>recipient") {
		t.Fatalf("%v\n%s", err, out)
	}
}
