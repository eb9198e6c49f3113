package envoycompat

import (
	"math"
	"regexp"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// stats are the per-limit counters envoyproxy/ratelimit keeps, under the
// Prometheus names its default statsd mapping gives them
// (ratelimit_service_rate_limit_total_hits{domain,key1,key2} and so on),
// served with USE_PROMETHEUS on PROMETHEUS_ADDR. Names built from request
// values (overrides, detailed_metric, value_to_metric) are unbounded in
// number, so at most maxStatsNames are kept apart; the rest are counted
// under key1="_other".
type stats struct {
	reg                                           *prometheus.Registry
	total, over, overLocal, near, within, shadowC *prometheus.CounterVec
	ratio                                         float32

	mu    sync.Mutex
	names map[string][3]string
}

// maxStatsNames bounds the label sets kept apart.
const maxStatsNames = 10000

func newStats(nearLimitRatio float32) *stats {
	s := &stats{reg: prometheus.NewRegistry(), ratio: nearLimitRatio, names: map[string][3]string{}}
	mk := func(name, help string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + name, Help: help},
			[]string{"domain", "key1", "key2"})
		s.reg.MustRegister(c)
		return c
	}
	s.total = mk("total_hits", "Hits of descriptors a limit applied to.")
	s.over = mk("over_limit", "Hits over the limit.")
	s.overLocal = mk("over_limit_with_local_cache", "Hits over the limit answered from the local cache.")
	s.near = mk("near_limit", "Hits past NEAR_LIMIT_RATIO of the limit.")
	s.within = mk("within_limit", "Hits within the limit.")
	s.shadowC = mk("shadow_mode", "Hits over a shadow_mode limit.")
	return s
}

var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// labels splits a stats name into domain, key1 and key2 as the default
// statsd mapping does, after the reference's clean-up of the name (':' and
// '|' to '_', the dots of an IPv4 address to '_').
func (s *stats) labels(name string) [3]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.names[name]; ok {
		return l
	}
	clean := strings.NewReplacer(":", "_", "|", "_").Replace(name)
	clean = ipv4.ReplaceAllStringFunc(clean, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
	parts := strings.SplitN(clean, ".", 4)
	var l [3]string
	copy(l[:], parts)
	if len(s.names) >= maxStatsNames {
		return [3]string{l[0], "_other", ""}
	}
	s.names[name] = l
	return l
}

// record counts one descriptor's hits: before and after are its count
// before and after them (after only from Redis; localOver when the local
// cache answered).
func (s *stats) record(name string, l *limit, hits, after uint64, localOver bool) {
	lb := s.labels(name)
	add := func(c *prometheus.CounterVec, n uint64) {
		if n > 0 {
			c.WithLabelValues(lb[0], lb[1], lb[2]).Add(float64(n))
		}
	}
	add(s.total, hits)
	if localOver {
		add(s.over, hits)
		add(s.overLocal, hits)
		if l.shadow {
			add(s.shadowC, hits)
		}
		return
	}
	over := uint64(l.perUnit)
	near := uint64(math.Floor(float64(float32(over) * s.ratio)))
	before := after - min(after, hits)
	if after > over {
		if before >= over {
			add(s.over, hits)
			if l.shadow {
				add(s.shadowC, hits)
			}
			return
		}
		add(s.over, after-over)
		add(s.near, over-max(near, before))
		if l.shadow {
			add(s.shadowC, after-over)
		}
		return
	}
	if after > near {
		if before >= near {
			add(s.near, hits)
		} else {
			add(s.near, after-near)
		}
	}
	add(s.within, hits)
}
