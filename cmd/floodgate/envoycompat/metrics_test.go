package envoycompat

import (
	"testing"
)

func TestStatsNames(t *testing.T) {
	c, err := LoadConfig([]File{{Name: "config.s", Text: []byte(`
domain: s
descriptors:
  - key: exact
    value: v
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: any
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: vm
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: wild
    value: "w*"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: det
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: parent
    value: p
    descriptors:
      - key: child
        rate_limit: {unit: second, requests_per_unit: 1}
`)}}, false, WildcardsTrailing)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		entries []entry
		want    string
	}{
		{[]entry{{"exact", "v"}}, "s.exact_v"},
		{[]entry{{"any", "x"}}, "s.any"},
		{[]entry{{"vm", "x"}}, "s.vm_x"},
		{[]entry{{"wild", "wx"}}, "s.wild_w*"},
		{[]entry{{"det", "x"}}, "s.det_x"},
		{[]entry{{"parent", "p"}, {"child", "c"}}, "s.parent_p.child"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := c.lookupStats("s", tc.entries, true).stats; got != tc.want {
				t.Errorf("%v: stats name %q, want %q", tc.entries, got, tc.want)
			}
		})
	}
}

func TestPrometheusStats(t *testing.T) {
	s, _ := newService(t, testRules, t0, func(s *Settings) { s.UsePrometheus = true; s.NearLimitRatio = 0.8 })
	for range 3 {
		call(t, s, 10, desc("generic", "p")) // 20 per minute: 10, 20, then 30
	}
	families, err := s.stats.prom.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			lb := map[string]string{}
			for _, l := range m.GetLabel() {
				lb[l.GetName()] = l.GetValue()
			}
			if lb["domain"] == "test" && lb["key1"] == "generic" {
				got[f.GetName()] = m.GetCounter().GetValue()
			}
		}
	}
	// near_limit: the hits past 16 (0.8 of 20) and up to 20; over_limit
	// the 10 past 20, as the reference counts them.
	for name, want := range map[string]float64{"total_hits": 30, "within_limit": 20, "over_limit": 10, "near_limit": 4} {
		if g := got["ratelimit_service_rate_limit_"+name]; g != want {
			t.Errorf("%s = %v, want %v (all: %v)", name, g, want, got)
		}
	}
}
