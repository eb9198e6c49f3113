package envoycompat

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLoadConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"empty domain", "descriptors: []\n", "config file cannot have empty domain"},
		{"unknown key", "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {}\n", "config error, unknown key 'ratelimit'"},
		{"non-string key", "domain: d\n0.25: x\n", "config error, key is not of type string"},
		{"list of scalars", "domain: d\ndescriptors: [a, b]\n", "config error, yaml file contains list of type other than map"},
		{"float value", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n", "error checking config"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", "descriptor has empty key"},
		{"duplicate", "domain: d\ndescriptors:\n  - {key: k, value: v}\n  - {key: k, value: v}\n", "duplicate descriptor composite key 'd.k_v'"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", "invalid rate limit unit 'fortnight'"},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", "should not specify rate limit unit when unlimited"},
		{"replaces empty", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n", "should not have an empty replaces entry"},
		{"replaces self", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: a, unit: second, requests_per_unit: 1, replaces: [{name: a}]}\n", "replaces should not contain name of same descriptor"},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", "share_threshold can only be used with wildcard values"},
		{"bad yaml", "domain: d\ndescriptors:\n  - key: [\n", "error loading config file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfig([]File{{Name: "config.f", Text: []byte(tc.text)}}, false, WildcardsAnywhere)
			if err == nil || !strings.HasPrefix(err.Error(), "config.f: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want config.f: ... %s", err, tc.want)
			}
		})
	}
}

func TestLoadConfigDomains(t *testing.T) {
	a := File{Name: "config.a", Text: []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}
	b := File{Name: "config.b", Text: []byte("domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n")}
	if _, err := LoadConfig([]File{a, b}, false, WildcardsAnywhere); err == nil || !strings.Contains(err.Error(), "config.b: duplicate domain 'd' in config file") {
		t.Fatalf("two files, one domain: %v", err)
	}
	c, err := LoadConfig([]File{a, b}, true, WildcardsAnywhere)
	if err != nil {
		t.Fatal(err)
	}
	if c.lookup("d", []entry{{"a", "x"}}).limit == nil || c.lookup("d", []entry{{"b", "x"}}).limit == nil {
		t.Fatal("MERGE_DOMAIN_CONFIG: both files' descriptors should apply")
	}
	empty, err := LoadConfig([]File{{Name: "config.e", Text: []byte("domain: e\ndescriptors:\n")}}, false, WildcardsAnywhere)
	if err != nil || empty.Empty() {
		t.Fatalf("a domain with an empty descriptors list: %v", err)
	}
}

const lookupRules = `
domain: w
descriptors:
  - key: k
    value: exact
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: "ex*"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: m
    value: "foo*bar*baz"
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: nest
    descriptors:
      - key: sub
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: lit
    value: "a*b"
    rate_limit: {unit: second, requests_per_unit: 6}
`

func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		wild    Wildcards
		entries []entry
		want    uint32 // 0: no limit
	}{
		{WildcardsAnywhere, []entry{{"k", "exact"}}, 1},
		{WildcardsAnywhere, []entry{{"k", "extra"}}, 2},
		{WildcardsAnywhere, []entry{{"k", "other"}}, 3},
		{WildcardsAnywhere, []entry{{"m", "fooXbarYbaz"}}, 4},
		{WildcardsAnywhere, []entry{{"m", "foobazbar"}}, 0},
		{WildcardsAnywhere, []entry{{"nest", "x"}}, 0},
		{WildcardsAnywhere, []entry{{"nest", "x"}, {"sub", "y"}}, 5},
		{WildcardsAnywhere, []entry{{"nest", "x"}, {"sub", "y"}, {"more", "z"}}, 0},
		{WildcardsAnywhere, []entry{{"", "x"}}, 0},
		{WildcardsAnywhere, []entry{{"lit", "aXb"}}, 6},
		{WildcardsTrailing, []entry{{"lit", "aXb"}}, 0},
		{WildcardsTrailing, []entry{{"lit", "a*b"}}, 6},
		{WildcardsTrailing, []entry{{"m", "fooXbarYbaz"}}, 0},
		{WildcardsTrailing, []entry{{"k", "extra"}}, 2},
	} {
		t.Run(fmt.Sprint(tc.wild, tc.entries), func(t *testing.T) {
			c, err := LoadConfig([]File{{Name: "config.w", Text: []byte(lookupRules)}}, false, tc.wild)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wild == WildcardsTrailing && !slices.Equal(c.Literal, []string{"config.w: w.m_foo*bar*baz", "config.w: w.lit_a*b"}) {
				t.Errorf("literal stars %q", c.Literal)
			}
			got := uint32(0)
			if l := c.lookup("w", tc.entries).limit; l != nil {
				got = l.perUnit
			}
			if got != tc.want {
				t.Errorf("wildcards %d, %v: limit %d per second, want %d", tc.wild, tc.entries, got, tc.want)
			}
		})
	}
}

func TestReadRuntime(t *testing.T) {
	root := t.TempDir()
	write := func(rel, text string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("ratelimit/config/basic.yaml", "domain: basic\n")
	write("ratelimit/config/.hidden.yaml", "domain: hidden\n")
	write("ratelimit/reload.yaml", "domain: reload\n")
	names := func(set Settings) []string {
		fs, err := ReadRuntime(set)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range fs {
			out = append(out, f.Name)
		}
		return out
	}
	base := Settings{RuntimePath: root, RuntimeSubdirectory: "ratelimit", RuntimeAppDirectory: "config", RuntimeWatchRoot: true}
	if got := names(base); !slices.Equal(got, []string{"config..hidden.yaml", "config.basic.yaml"}) {
		t.Errorf("RUNTIME_WATCH_ROOT=true: %v", got)
	}
	ign := base
	ign.RuntimeIgnoreDotFiles = true
	if got := names(ign); !slices.Equal(got, []string{"config.basic.yaml"}) {
		t.Errorf("RUNTIME_IGNOREDOTFILES=true: %v", got)
	}
	noRoot := ign
	noRoot.RuntimeWatchRoot = false
	if got := names(noRoot); !slices.Equal(got, []string{"basic.yaml"}) {
		t.Errorf("RUNTIME_WATCH_ROOT=false: %v", got)
	}
}

func TestParseSettings(t *testing.T) {
	s, err := ParseSettings(mapLookup(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s.Port != 8080 || s.GrpcPort != 8081 || s.DebugPort != 6070 || s.Redis.SocketType != "unix" || s.Redis.Type != "single" ||
		s.ExpirationJitterMaxSeconds != 300 || s.HeaderLimit != "RateLimit-Limit" || !s.RuntimeWatchRoot || s.RuntimeAppDirectory != "config" {
		t.Fatalf("defaults %+v", s)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"BACKEND_TYPE": "memcache"}, "BACKEND_TYPE=memcache: only the redis backend"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS"}, `CONFIG_TYPE: "GRPC_XDS" is not one of file, grpc_xds_sotw`},
		{map[string]string{"USE_DOG_STATSD": "true"}, "USE_DOG_STATSD=true: DogStatsD is not sent"},
		{map[string]string{"USE_PROMETHEUS": "true"}, "USE_STATSD and USE_PROMETHEUS are both true"},
		{map[string]string{"PORT": "x"}, `PORT: "x" is not a whole number`},
		{map[string]string{"REDIS_TYPE": "ring"}, `REDIS_TYPE: "ring" is not one of single, cluster, sentinel`},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "onlymaster"}, "REDIS_URL: a sentinel address is"},
		{map[string]string{"NEAR_LIMIT_RATIO": "2"}, "NEAR_LIMIT_RATIO"},
		{map[string]string{"SHADOW_MODE": "maybe"}, `SHADOW_MODE: "maybe" is not true or false`},
		{map[string]string{"FLOODGATE_WILDCARDS": "some"}, `FLOODGATE_WILDCARDS: "some": want trailing`},
		{map[string]string{"REDIS_CLUSTER_PIPELINE_PARALLELISM": "-1"}, "REDIS_CLUSTER_PIPELINE_PARALLELISM: redis cluster pipeline parallelism must be >= 0"},
		{map[string]string{"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM": "x"}, `REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM: "x" is not a whole number`},
		{map[string]string{"TRACING_EXPORTER_PROTOCOL": "zipkin"}, `TRACING_EXPORTER_PROTOCOL: "zipkin": want http or grpc`},
		{map[string]string{"TRACING_SAMPLING_RATE": "half"}, `TRACING_SAMPLING_RATE: "half" is not a number`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if _, err := ParseSettings(mapLookup(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v, want %q", tc.env, err, tc.want)
			}
		})
	}
	s, err = ParseSettings(mapLookup(map[string]string{"USE_STATSD": "false", "REDIS_TYPE": "Cluster", "LIMIT_RESPONSE_HEADERS_ENABLED": "1"}))
	if err != nil || s.Redis.Type != "cluster" || !s.HeadersEnabled || s.Wildcards != WildcardsAnywhere {
		t.Fatalf("%+v, %v", s, err)
	}
	if s, err := ParseSettings(mapLookup(map[string]string{"FLOODGATE_WILDCARDS": "trailing"})); err != nil || s.Wildcards != WildcardsTrailing {
		t.Fatalf("FLOODGATE_WILDCARDS=trailing: %v, %v", s.Wildcards, err)
	}
	if s.Redis.ClusterParallelism != 1 || s.PerSecond.ClusterParallelism != 1 || s.Tracing.Enabled || s.Tracing.ServiceName != "RateLimit" ||
		s.Tracing.Protocol != "http" || s.Tracing.SamplingRate != 1 {
		t.Fatalf("defaults: parallelism %d/%d, tracing %+v", s.Redis.ClusterParallelism, s.PerSecond.ClusterParallelism, s.Tracing)
	}
	s, err = ParseSettings(mapLookup(map[string]string{"REDIS_CLUSTER_PIPELINE_PARALLELISM": "0", "TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc"}))
	if err != nil || s.Redis.ClusterParallelism != 0 || !s.Tracing.Enabled || s.Tracing.Protocol != "grpc" {
		t.Fatalf("parallelism 0 and tracing over grpc: %+v, %v", s, err)
	}
}

// FuzzParseSettings feeds ParseSettings environment lines NAME=value: it
// must return settings or an error, never panic.
func FuzzParseSettings(f *testing.F) {
	for _, seed := range []string{
		"PORT=8080\nREDIS_URL=127.0.0.1:6379\nREDIS_SOCKET_TYPE=tcp",
		"REDIS_TYPE=sentinel\nREDIS_URL=m,a:1,b:2",
		"NEAR_LIMIT_RATIO=NaN\nEXPIRATION_JITTER_MAX_SECONDS=-1",
		"GRPC_MAX_CONNECTION_AGE=1h\nLOG_LEVEL=debug\nLOG_FORMAT=json",
		"USE_STATSD=true",
		"REDIS_PERSECOND=true\nREDIS_PERSECOND_URL=",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, env string) {
		m := map[string]string{}
		for _, line := range strings.Split(env, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				m[k] = v
			}
		}
		ParseSettings(mapLookup(m))
	})
}

// FuzzLoadConfig feeds LoadConfig any text: it must load or return an
// error naming the file, never panic; a loaded set answers lookups.
func FuzzLoadConfig(f *testing.F) {
	f.Add(testRules)
	f.Add("domain: d\ndescriptors:\n  - key: k\n    value: 'a*b*'\n    share_threshold: true\n    descriptors:\n      - key: s\n        rate_limit: {unit: day, requests_per_unit: 3}\n")
	f.Add("domain: d\ndescriptors:\n  - key: k\n    metadata: {a: [1, {b: c}]}\n    rate_limit: {unlimited: true}\n")
	f.Add("domain: d\ndescriptors:\n")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := LoadConfig([]File{{Name: "config.f", Text: []byte(text)}}, false, WildcardsAnywhere)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config.f: ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for d := range c.domains {
			c.lookup(d, []entry{{"k", "ab"}, {"s", "x"}})
		}
	})
}
