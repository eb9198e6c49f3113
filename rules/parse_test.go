package rules

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

func TestParseFields(t *testing.T) {
	s := mustParse(t, `
domain: api
shadow: false
rules:
  - name: every-field
    description: all the knobs
    match:
      path: {prefix: /v1/}
      header:X-Plan: [free, pro]
    count_by: [tenant, header:X-Api-Key]
    limit: 100
    window: 1m30s
    algorithm: token-bucket
    capacity: 20
    rate: 2.5
    cost: {from: header:x-weight, default: 3}
    shadow: true
    failure: local
    overrides:
      - match: {tenant: acme}
        limit: 200
        window: 2m
`)
	if s.Domain() != "api" || s.Format() != formatFloodgate || s.Len() != 1 {
		t.Fatalf("set: %s %s %d", s.Domain(), s.Format(), s.Len())
	}
	r := s.rules[0]
	cfg := r.base.alg.Config()
	if cfg.Algorithm != algorithm.TokenBucket || cfg.Limit != 100 || cfg.Window != 90*time.Second || cfg.Capacity != 20 || cfg.Rate != 2.5 {
		t.Errorf("config: %+v", cfg)
	}
	if !slicesEqual(r.countBy, []string{"tenant", "header:x-api-key"}) {
		t.Errorf("count_by %v: header names must be lower-cased", r.countBy)
	}
	if c := r.match.find("header:x-plan"); c == nil || c.m.kind != matchOneOf {
		t.Errorf("match: %v", r.match)
	}
	if r.cost != (cost{from: "header:x-weight", def: 3}) || !r.shadow || r.failure != store.FailLocal {
		t.Errorf("cost/shadow/failure: %+v %v %v", r.cost, r.shadow, r.failure)
	}
	o := r.overrides[0].lim.alg.Config()
	if o.Limit != 200 || o.Window != 2*time.Minute || o.Capacity != 20 || o.Algorithm != algorithm.TokenBucket {
		t.Errorf("override keeps the rule's other parameters: %+v", o)
	}
	info := s.Rules()[0]
	if info.Name != "every-field" || info.Key != "tenant+header:x-api-key" || info.Failure != "local" || !info.Shadow || len(info.Overrides) != 1 {
		t.Errorf("info: %+v", info)
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

func TestDefaultAndExamplesParse(t *testing.T) {
	if err := defaultErr(); err != nil {
		t.Fatalf("embedded default.yaml: %v", err)
	}
	if d := Default(); d.Len() == 0 || d.Domain() != "default" {
		t.Fatalf("default: %d rules, domain %q", d.Len(), d.Domain())
	}
	files, _ := filepath.Glob("../examples/*.yaml")
	fixtures, _ := filepath.Glob("testdata/floodgate/*.yaml")
	files = append(files, fixtures...)
	if len(files) == 0 {
		t.Fatal("no example rule files")
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// Every error names the file and line, says what is wrong and how to fix it.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       string // "LINE: substring"
	}{
		{"empty", ``, "test.yaml: the file is empty"},
		{"comments only", "# nothing yet\n", "test.yaml: the file is empty"},
		{"two documents", "domain: a\nrules: []\n---\ndomain: b\nrules: []\n", "test.yaml:3: a second YAML document starts here"},
		{"syntax", "domain: a\nrules:\n  - name: x\n   limit: 3\n", "test.yaml:2: YAML syntax: did not find expected '-' indicator; check the indentation"},
		{"unquoted star", "domain: a\nrules:\n  - name: x\n    match:\n      member: *\n", `test.yaml:5: YAML syntax: did not find expected alphabetic or numeric character; a value starting with * is read as a YAML alias: quote it`},
		{"unquoted star glob", "domain: a\nrules:\n  - name: x\n    match:\n      host: *example\n", `test.yaml:5: YAML alias *example refers to nothing; a value starting with * is read as a YAML alias`},
		{"tab", "domain: a\nrules:\n\t- name: x\n", "test.yaml:3: YAML syntax: found character that cannot start any token; the line holds a tab"},
		{"not mapping", "- a\n- b\n", "test.yaml:1: a rule file is a mapping"},
		{"no rules", "domain: a\n", "test.yaml:1: no rules: write a rules: list"},
		{"both formats", "domain: a\nrules: []\ndescriptors: []\n", "has both rules:"},
		{"unknown top", "domain: a\nrulez: []\nrules: []\n", `test.yaml:2: the file: unknown field "rulez"`},
		{"no domain", "rules: []\n", "test.yaml:1: domain is missing"},
		{"bad domain", "domain: 'a b'\nrules: []\n", "test.yaml:1: domain \"a b\" must start"},
		{"unknown field", "domain: a\nrules:\n  - name: x\n    count_by: global\n    limit: 1\n    window: 1s\n    limt: 3\n",
			`test.yaml:7: rule "x": unknown field "limt"; the fields are name,`},
		{"suggestion", "domain: a\nrules:\n  - name: x\n    count_by: global\n    limit: 1\n    window: 1s\n    windw: 3\n", `(did you mean "window"?)`},
		{"duplicate field", "domain: a\nrules:\n  - name: x\n    count_by: global\n    limit: 1\n    limit: 2\n    window: 1s\n",
			`test.yaml:6: rule "x": field "limit" appears twice (first on line 5)`},
		{"duplicate name", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 1, window: 1s}\n  - {name: x, count_by: global, limit: 1, window: 1s}\n",
			`test.yaml:4: rule name "x" is already used on line 3`},
		{"no name", "domain: a\nrules:\n  - {count_by: global, limit: 1, window: 1s}\n", "test.yaml:3: rule has no name"},
		{"bad name", "domain: a\nrules:\n  - {name: 'a b', count_by: global, limit: 1, window: 1s}\n", `test.yaml:3: rule name "a b" must start`},
		{"no count_by", "domain: a\nrules:\n  - {name: x, limit: 1, window: 1s}\n", "test.yaml:3: rule \"x\": count_by is missing"},
		{"count_by scalar", "domain: a\nrules:\n  - {name: x, count_by: member, limit: 1, window: 1s}\n", "count_by must be a list, such as count_by: [member]"},
		{"count_by global list", "domain: a\nrules:\n  - {name: x, count_by: [global], limit: 1, window: 1s}\n", "write count_by: global, not a list"},
		{"unlimited override without count_by", "domain: a\nrules:\n  - name: x\n    unlimited: true\n    overrides:\n      - {match: {client: bad}, limit: 5, window: 1m}\n", "an override limits requests, so the rule needs count_by too"},
		{"count_by twice", "domain: a\nrules:\n  - {name: x, count_by: [a, a], limit: 1, window: 1s}\n", `count_by lists "a" twice`},
		{"no limit", "domain: a\nrules:\n  - {name: x, count_by: global, window: 1s}\n", "limit is missing"},
		{"no window", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 1}\n", "window is missing; write any Go duration"},
		{"bad window", "domain: a\nrules:\n  - name: x\n    count_by: global\n    limit: 1\n    window: 5 minutes\n",
			`test.yaml:6: rule "x": window "5 minutes" is not a duration`},
		{"huge window", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 1, window: 10000h}\n", "window must be above 0 and at most 8784h"},
		{"negative window", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 1, window: -1s}\n", "window must be above 0"},
		{"huge limit", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 99999999999999, window: 1s}\n", "limit must be between 0 and 4294967294"},
		{"overflow limit", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 999999999999999999999, window: 1s}\n", "limit must be a whole number"},
		{"float limit", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 1.5, window: 1s}\n", "limit must be a whole number; got \"1.5\""},
		{"unknown algorithm", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 1, window: 1s, algorithm: token-buket}\n",
			`unknown algorithm "token-buket"; use one of fixed-window,`},
		{"param for other algorithm", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 1, window: 1s, slices: 4}\n",
			"slices does not apply to bounded-log (it is for sliding-window)"},
		{"too many slices", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 1, window: 1s, algorithm: sliding-window, slices: 2000}\n",
			`test.yaml:3: rule "x": sliding-window: slices must be between 1 and 1024, got 2000`},
		{"no slices", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 1, window: 1s, algorithm: sliding-window, slices: 0}\n",
			`test.yaml:3: rule "x": slices must be at least 1; got 0`},
		{"negative slices", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 1, window: 1s, algorithm: sliding-window, slices: -3}\n",
			"sliding-window: slices must be between 1 and 1024, got -3"},
		{"bad tolerance", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 1, window: 1s, tolerance: 2}\n", "tolerance must be above 0 and at most 1"},
		{"bad failure", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 1, window: 1s, failure: maybe}\n", `failure "maybe" is not a policy; use open`},
		{"bad shadow", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 1, window: 1s, shadow: yes please}\n", "shadow must be true or false"},
		{"unlimited with limit", "domain: a\nrules:\n  - {name: x, unlimited: true, limit: 1}\n", "an unlimited rule takes no limit"},
		{"bad pattern", "domain: a\nrules:\n  - {name: x, match: {path: {prefx: /a}}, count_by: global, limit: 1, window: 1s}\n", `unknown field "prefx"`},
		{"two patterns", "domain: a\nrules:\n  - {name: x, match: {path: {prefix: /a, exact: /b}}, count_by: global, limit: 1, window: 1s}\n", "give exactly one of exact, prefix, glob, cidr or any"},
		{"match not mapping", "domain: a\nrules:\n  - {name: x, match: [a], count_by: global, limit: 1, window: 1s}\n", "match must be a mapping of entry: pattern"},
		{"empty header", "domain: a\nrules:\n  - {name: x, match: {'header:': a}, count_by: global, limit: 1, window: 1s}\n", "names no header"},
		{"long key", "domain: a\nrules:\n  - {name: x, count_by: [" + strings.Repeat("k", maxKeyLen+1) + "], limit: 1, window: 1s}\n", "bytes long; the most is 128"},
		{"override without match", "domain: a\nrules:\n  - name: x\n    count_by: global\n    limit: 1\n    window: 1s\n    overrides:\n      - limit: 5\n",
			"test.yaml:8: rule \"x\": override has no match"},
		{"override no change", "domain: a\nrules:\n  - name: x\n    count_by: global\n    limit: 1\n    window: 1s\n    overrides:\n      - match: {a: b}\n",
			"override changes nothing"},
		{"cost above limit", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 2, window: 1s, cost: 3}\n", "cost 3 is above the limit 2"},
		{"cost zero", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 2, window: 1s, cost: 0}\n", "cost must be between 1 and"},
		{"cost no from", "domain: a\nrules:\n  - {name: x, count_by: global, limit: 2, window: 1s, cost: {default: 2}}\n", "cost needs from:"},
		{"bad cidr", "domain: a\nrules:\n  - {name: x, match: {ip: {cidr: 10.0.0.0/33}}, count_by: global, limit: 1, window: 1s}\n", `cidr "10.0.0.0/33" is not an address range`},
		{"alias", "domain: a\nrules:\n  - &r {name: x, count_by: global, limit: 2, window: 1s}\n  - *r\n", "aliases (*name) are not supported"},

		// envoyproxy/ratelimit format
		{"envoy share_threshold without wildcard", "domain: a\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`test.yaml:5: share_threshold needs a wildcard value`},
		{"envoy quota_mode without limit", "domain: a\ndescriptors:\n  - key: k\n    quota_mode: true\n", `test.yaml:4: quota_mode without a rate_limit`},
		{"envoy metadata not a mapping", "domain: a\ndescriptors:\n  - key: k\n    metadata: [1]\n", `test.yaml:4: metadata must be a mapping`},
		{"envoy value_to_metric not bool", "domain: a\ndescriptors:\n  - key: k\n    value_to_metric: maybe\n", `test.yaml:4: value_to_metric must be true or false`},
		{"envoy unknown field", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    shadow: true\n",
			`test.yaml:5: descriptor: unknown field "shadow"; the fields are key, value, rate_limit, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold, metadata (did you mean "shadow_mode"?)`},
		{"envoy bad unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", `test.yaml:4: unit "fortnight" is not a unit`},
		{"envoy no key", "domain: a\ndescriptors:\n  - value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "test.yaml:3: descriptor has no key"},
		{"envoy duplicate", "domain: a\ndescriptors:\n  - {key: k, value: v}\n  - {key: k, value: v}\n", `test.yaml:4: descriptor "k"="v" appears twice at this level (first on line 3)`},
		{"envoy no rpu", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n", "rate_limit has no requests_per_unit"},
		{"envoy unlimited with unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", "an unlimited rate_limit takes no unit"},
		{"envoy replaces self", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {name: n, unit: second, requests_per_unit: 1, replaces: [{name: n}]}\n", "cannot replace itself"},
		{"envoy replaces unknown", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: nope}]}\n", `replaces "nope", but no rate_limit has that name`},
		{"envoy rpu too big", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5000000000}\n", "requests_per_unit must be between 0 and 4294967294"},
		{"envoy no domain", "descriptors:\n  - key: k\n", "domain is missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(c.text))
			if err == nil {
				t.Fatalf("no error, want %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error is not a *rules.Error: %T", err)
			}
		})
	}
}

func TestParseReportsSeveralErrors(t *testing.T) {
	_, err := Parse("f.yaml", []byte("domain: a\nrules:\n  - {name: x, count_by: global, limit: -1, window: 1s}\n  - {name: y, count_by: global, limit: 1, window: 1y}\n"))
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "f.yaml:3:") || !strings.HasPrefix(lines[1], "f.yaml:4:") {
		t.Fatalf("want two errors in line order, got:\n%v", err)
	}
}

func TestParseBounds(t *testing.T) {
	big := make([]byte, maxFileSize+1)
	if _, err := Parse("big.yaml", big); err == nil || !strings.Contains(err.Error(), "the most is") {
		t.Fatalf("oversized file: %v", err)
	}
	long := "domain: a\nrules:\n  - {name: x, match: {a: " + strings.Repeat("v", maxValueLen+1) + "}, count_by: global, limit: 1, window: 1s}\n"
	if _, err := Parse("f.yaml", []byte(long)); err == nil || !strings.Contains(err.Error(), "bytes long") {
		t.Fatalf("oversized value: %v", err)
	}
	// A billion-laughs style file is refused without expanding it.
	laughs := "domain: a\nx: &a [1,1,1,1,1,1,1,1,1]\ny: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nz: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nrules: [*c]\n"
	if _, err := Parse("f.yaml", []byte(laughs)); err == nil {
		t.Fatal("alias bomb accepted")
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	p := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(p, []byte("domain: a\nrules:\n  - name: x\n"), 0o644)
	_, err := Load(p)
	if err == nil || !strings.HasPrefix(err.Error(), p+":3: ") {
		t.Fatalf("error does not start with FILE:LINE: %v", err)
	}
}
