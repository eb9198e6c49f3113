package envoycompat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// series flattens gathered metrics to "name{k=v,...}" -> value (counters)
// or sample sum (histograms), labels sorted, empty ones left out as
// Prometheus leaves them out.
func series(t *testing.T, families []*dto.MetricFamily) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var lb []string
			for _, l := range m.GetLabel() {
				if l.GetValue() != "" {
					lb = append(lb, l.GetName()+"="+l.GetValue())
				}
			}
			v := m.GetCounter().GetValue()
			if h := m.GetHistogram(); h != nil {
				v = h.GetSampleSum()
			}
			out[f.GetName()+"{"+strings.Join(lb, ",")+"}"] = v
		}
	}
	return out
}

func TestMapper(t *testing.T) {
	custom := `
mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "hits_$1"
    labels: {route: "$2"}
  - match: "ratelimit.service.rate_limit.*.*.*"
    action: drop
  - match: 'ratelimit_server\.(.*)\.response_time'
    match_type: regex
    name: rt
    labels: {method: "$1"}
`
	for _, tc := range []struct {
		name, mapping string // mapping "" for the default one
		feed          func(s *stats)
		want          map[string]float64
		absent        []string // name prefixes that must not be served
	}{
		{"default", "", func(s *stats) {
			s.limit("d.k_v").total(5)
			s.limit("d.a_1.b_2.c_3").total(2)
			s.limit("d.k_v")[statOverLocal].add(1)
			s.redisError.add(2)
			s.configLoadSuccess.add(1)
			s.method("ShouldRateLimit").time.add(250, false)
		}, map[string]float64{
			"ratelimit_service_rate_limit_total_hits{domain=d,key1=k_v}":           5,
			"ratelimit_service_rate_limit_total_hits{domain=d,key1=a_1,key2=b_2}":  2,
			"ratelimit_service_rate_limit_d_k_v_over_limit_with_local_cache{}":     1,
			"ratelimit_service_should_rate_limit_error{err_type=redis_error}":      2,
			"ratelimit_service_config_load_success{}":                              1,
			"ratelimit_service_response_time_seconds{grpc_method=ShouldRateLimit}": 0.25,
		}, nil},
		{"custom", custom, func(s *stats) {
			s.limit("gw.route_a").total(3)
			s.limit("gw.route_a")[statOver].add(1)
			s.method("ShouldRateLimit").time.add(7, false)
		}, map[string]float64{
			"hits_gw{route=route_a}":     3,
			"rt{method=ShouldRateLimit}": 7,
		}, []string{"ratelimit_service_rate_limit_over_limit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.mapping != "" {
				path = filepath.Join(t.TempDir(), "conf.yaml")
				os.WriteFile(path, []byte(tc.mapping), 0o644)
			}
			m, err := loadMapper(path)
			if err != nil {
				t.Fatal(err)
			}
			s := newStats(0.8, m)
			tc.feed(s)
			fams, err := s.prom.reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := series(t, fams)
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
				}
			}
			for k := range got {
				for _, a := range tc.absent {
					if strings.HasPrefix(k, a) {
						t.Errorf("%s served; the mapping drops it", k)
					}
				}
			}
		})
	}
}

// total adds n hits to a limit's total_hits, for tests.
func (l *limitStats) total(n uint64) { l[statTotal].add(n) }

func TestMapperErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, text, want string }{
		{"bad regex", "mappings:\n  - {match: '(', match_type: regex, name: x}\n", "mapping 1"},
		{"unknown match type", "mappings:\n  - {match: a, match_type: fancy, name: x}\n", `match_type "fancy"`},
		{"no name", "mappings:\n  - {match: a}\n", "no name"},
		{"not YAML", "mappings: [", "PROMETHEUS_MAPPER_YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			os.WriteFile(p, []byte(tc.text), 0o644)
			if _, err := loadMapper(p); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "PROMETHEUS_MAPPER_YAML") {
				t.Fatalf("err %v, want one naming PROMETHEUS_MAPPER_YAML with %q", err, tc.want)
			}
		})
	}
	if _, err := loadMapper(filepath.Join(dir, "missing.yaml")); err == nil || !strings.HasPrefix(err.Error(), "PROMETHEUS_MAPPER_YAML") {
		t.Fatalf("missing file: %v", err)
	}
}

// FuzzMapper feeds any mapping file and stat name: loading it fails with an
// error or maps the name, never panics.
func FuzzMapper(f *testing.F) {
	f.Add(defaultMapping, "ratelimit.service.rate_limit.d.k.total_hits")
	f.Add("mappings:\n  - {match: 'a.*', name: 'x_$1', labels: {l: '$1'}}\n", "a.b")
	f.Add("mappings:\n  - {match: '(.*)', match_type: regex, action: drop}\n", "z")
	f.Fuzz(func(t *testing.T, text, stat string) {
		m, err := parseMapper([]byte(text))
		if err != nil {
			return
		}
		s := newStats(0.8, m)
		s.limit(stat).total(1)
		s.method(stat).time.add(1, false)
		s.prom.reg.Gather()
	})
}

// TestResponseTimeUnits: the default mapping serves response times in
// seconds; PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=true keeps them in
// milliseconds, as the reference's option does.
func TestResponseTimeUnits(t *testing.T) {
	const series0 = "ratelimit_service_response_time_seconds{grpc_method=ShouldRateLimit}"
	for _, tc := range []struct {
		env  string
		want float64
	}{{"false", 0.25}, {"true", 250}} {
		set, err := ParseSettings(mapLookup(map[string]string{"USE_STATSD": "false", "USE_PROMETHEUS": "true",
			"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": tc.env}))
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewService(set, nil, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.stats.method("ShouldRateLimit").time.add(250, false)
		fams, err := s.stats.prom.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if got := series(t, fams)[series0]; got != tc.want {
			t.Errorf("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=%s: a 250 ms call is %v, want %v", tc.env, got, tc.want)
		}
	}
}
