package envoycompat

import (
	"math"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// stats are the stats envoyproxy/ratelimit keeps, under its statsd names:
// per limit ratelimit.service.rate_limit.<name>.{total_hits, over_limit,
// near_limit, within_limit, shadow_mode, over_limit_with_local_cache}, and
// ratelimit.service.config_load_{success,error},
// ratelimit.service.call.should_rate_limit.{redis_error,service_error},
// ratelimit.service.global_shadow_mode,
// ratelimit_server.ShouldRateLimit.{total_requests,response_time}. They go
// to statsd (USE_STATSD, see statsdSink) or are served to Prometheus
// (USE_PROMETHEUS) under the names a statsd_exporter mapping gives them
// (the reference's default one, or PROMETHEUS_MAPPER_YAML). Names built
// from request values (overrides, detailed_metric, value_to_metric) are
// unbounded in number, so at most maxStatsNames are kept apart; the rest
// are counted under the name "<domain>._other".
type stats struct {
	ratio float32
	prom  *promStats // nil without USE_PROMETHEUS

	mu     sync.RWMutex
	names  map[string]*limitStats
	counts []*counter // every counter, for the statsd flush

	configLoadSuccess, configLoadError, redisError, serviceError, globalShadow *counter
	// methods are, per gRPC method name, its calls and response times.
	methods map[string]*methodStats
	// notFound are, per unknown domain asked for, its domain_not_found.
	notFound map[string]*counter
	timers   []*timer
}

// methodStats are the reference's stats of one gRPC method:
// ratelimit_server.<method>.total_requests and .response_time.
type methodStats struct {
	calls *counter
	time  *timer
}

// Per-limit stats, in the order of limitStats.
const (
	statTotal = iota
	statOver
	statNear
	statWithin
	statShadow
	statOverLocal
	numLimitStats
)

var limitStatNames = [numLimitStats]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode", "over_limit_with_local_cache"}

// limitStats are one limit's counters.
type limitStats [numLimitStats]*counter

// counter is one statsd counter: its total, what the last flush sent, and
// its Prometheus counter (nil when not served or dropped by the mapping).
type counter struct {
	name string
	n    atomic.Uint64
	sent uint64 // owned by the statsd flush
	prom prometheus.Counter
}

func (c *counter) add(n uint64) {
	if n == 0 {
		return
	}
	c.n.Add(n)
	if c.prom != nil {
		c.prom.Add(float64(n))
	}
}

// timer is one statsd timer: values in milliseconds, sent one line each at
// the next flush (at most maxTimerValues per flush), and observed by its
// Prometheus histogram.
type timer struct {
	name  string
	mu    sync.Mutex
	vals  []float64
	prom  prometheus.Observer
	scale float64
}

// maxTimerValues bounds the timer values kept between two statsd flushes.
const maxTimerValues = 1 << 16

func (t *timer) add(ms float64, toStatsd bool) {
	if t.prom != nil {
		t.prom.Observe(ms * t.scale)
	}
	if !toStatsd {
		return
	}
	t.mu.Lock()
	if len(t.vals) < maxTimerValues {
		t.vals = append(t.vals, ms)
	}
	t.mu.Unlock()
}

// maxStatsNames bounds the per-limit names kept apart.
const maxStatsNames = 10000

// newStats returns the stats, served to Prometheus through m when m is not
// nil.
func newStats(nearLimitRatio float32, m *mapper) *stats {
	s := &stats{ratio: nearLimitRatio, names: map[string]*limitStats{}}
	if m != nil {
		s.prom = newPromStats(m)
	}
	s.configLoadSuccess = s.newCounter("ratelimit.service.config_load_success")
	s.configLoadError = s.newCounter("ratelimit.service.config_load_error")
	s.redisError = s.newCounter("ratelimit.service.call.should_rate_limit.redis_error")
	s.serviceError = s.newCounter("ratelimit.service.call.should_rate_limit.service_error")
	s.globalShadow = s.newCounter("ratelimit.service.global_shadow_mode")
	s.methods = map[string]*methodStats{}
	s.notFound = map[string]*counter{}
	return s
}

// domainNotFound is the counter ratelimit.service.rate_limit.<domain>.domain_not_found
// of a domain no rule file has; past maxStatsNames domains, _other's.
func (s *stats) domainNotFound(domain string) *counter {
	s.mu.RLock()
	c := s.notFound[domain]
	s.mu.RUnlock()
	if c != nil {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.notFound) >= maxStatsNames {
		domain = "_other"
	}
	if c = s.notFound[domain]; c == nil {
		c = s.newCounter("ratelimit.service.rate_limit." + sanitizeStatName(domain) + ".domain_not_found")
		s.notFound[domain] = c
	}
	return c
}

// method returns the stats of the gRPC method named name.
func (s *stats) method(name string) *methodStats {
	s.mu.RLock()
	m := s.methods[name]
	s.mu.RUnlock()
	if m != nil {
		return m
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m = s.methods[name]; m != nil {
		return m
	}
	base := "ratelimit_server." + sanitizeStatName(name) + "."
	m = &methodStats{calls: s.newCounter(base + "total_requests"), time: &timer{name: base + "response_time", scale: 1}}
	if s.prom != nil {
		m.time.prom, m.time.scale = s.prom.observer(m.time.name)
	}
	s.timers = append(s.timers, m.time)
	s.methods[name] = m
	return m
}

// allTimers returns every timer so far.
func (s *stats) allTimers() []*timer {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.timers[:len(s.timers):len(s.timers)]
}

// newCounter makes a counter; s.mu must be held or s not yet shared.
func (s *stats) newCounter(name string) *counter {
	c := &counter{name: name}
	if s.prom != nil {
		c.prom = s.prom.counter(name)
	}
	s.counts = append(s.counts, c)
	return c
}

var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// sanitizeStatName is the reference's clean-up of a stats name: ':' and
// '|' to '_', and the dots of an IPv4 address to '_'.
func sanitizeStatName(name string) string {
	clean := strings.NewReplacer(":", "_", "|", "_").Replace(name)
	return ipv4.ReplaceAllStringFunc(clean, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

// limit returns the counters of the limit named name (domain.key_value...).
func (s *stats) limit(name string) *limitStats {
	s.mu.RLock()
	l := s.names[name]
	s.mu.RUnlock()
	if l != nil {
		return l
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l = s.names[name]; l != nil {
		return l
	}
	key := name
	if len(s.names) >= maxStatsNames {
		domain, _, _ := strings.Cut(name, ".")
		key = domain + "._other"
		if l = s.names[key]; l != nil {
			return l
		}
	}
	l = new(limitStats)
	base := "ratelimit.service.rate_limit." + sanitizeStatName(key) + "."
	for i, n := range limitStatNames {
		l[i] = s.newCounter(base + n)
	}
	s.names[key] = l
	return l
}

// record counts one descriptor's hits: after is its count after them (from
// Redis; unused when localOver, the local cache answered).
func (s *stats) record(name string, l *limit, hits, after uint64, localOver bool) {
	c := countHits(l, s.ratio, hits, after, localOver)
	ls := s.limit(name)
	for i, n := range c {
		ls[i].add(n)
	}
}

// countHits splits a descriptor's hits into the reference's per-limit
// stats: every hit in total_hits; over_limit the hits past the limit;
// near_limit those past NEAR_LIMIT_RATIO of it up to the limit (when the
// count crosses the limit, the part between the two); within_limit the
// hits that were not over; shadow_mode the over ones of a shadow limit.
func countHits(l *limit, ratio float32, hits, after uint64, localOver bool) [numLimitStats]uint64 {
	var c [numLimitStats]uint64
	c[statTotal] = hits
	if localOver {
		c[statOver], c[statOverLocal] = hits, hits
		if l.shadow {
			c[statShadow] = hits
		}
		return c
	}
	over := uint64(l.perUnit)
	near := uint64(math.Floor(float64(float32(over) * ratio)))
	before := after - min(after, hits)
	if after > over {
		if before >= over {
			c[statOver] = hits
		} else {
			c[statOver] = after - over
			c[statNear] = over - max(near, before)
		}
		if l.shadow {
			c[statShadow] = c[statOver]
		}
		return c
	}
	if after > near {
		c[statNear] = hits
		if before < near {
			c[statNear] = after - near
		}
	}
	c[statWithin] = hits
	return c
}

// allCounters returns every counter so far.
func (s *stats) allCounters() []*counter {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.counts[:len(s.counts):len(s.counts)]
}

// promStats are the Prometheus metrics the mapping gives the stats, one
// vector per metric name.
type promStats struct {
	reg    *prometheus.Registry
	mapper *mapper

	mu         sync.Mutex
	counters   map[string]*prometheus.CounterVec
	histograms map[string]*prometheus.HistogramVec
}

func newPromStats(m *mapper) *promStats {
	return &promStats{reg: prometheus.NewRegistry(), mapper: m,
		counters: map[string]*prometheus.CounterVec{}, histograms: map[string]*prometheus.HistogramVec{}}
}

func labelNames(labels map[string]string) []string {
	names := make([]string, 0, len(labels))
	for k := range labels {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// counter is the Prometheus counter of the statsd counter stat, nil when
// the mapping drops it or gives its name another type or label set (as
// statsd_exporter, which counts such a stat as a conflict and drops it).
func (p *promStats) counter(stat string) prometheus.Counter {
	m := p.mapper.lookup(stat, kindCounter)
	if m.drop {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, taken := p.histograms[m.name]; taken {
		return nil
	}
	names := labelNames(m.labels)
	v := p.counters[m.name]
	if v == nil {
		v = prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.name, Help: "Metric autogenerated by the statsd mapping."}, names)
		if p.reg.Register(v) != nil {
			return nil
		}
		p.counters[m.name] = v
	}
	c, err := v.GetMetricWith(m.labels)
	if err != nil {
		return nil
	}
	return c
}

// observer is the Prometheus histogram of the statsd timer stat and the
// scale its values take, nil when dropped or in conflict.
func (p *promStats) observer(stat string) (prometheus.Observer, float64) {
	m := p.mapper.lookup(stat, kindObserver)
	if m.drop {
		return nil, 1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, taken := p.counters[m.name]; taken {
		return nil, 1
	}
	v := p.histograms[m.name]
	if v == nil {
		v = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.name, Help: "Metric autogenerated by the statsd mapping."}, labelNames(m.labels))
		if p.reg.Register(v) != nil {
			return nil, 1
		}
		p.histograms[m.name] = v
	}
	o, err := v.GetMetricWith(m.labels)
	if err != nil {
		return nil, 1
	}
	return o, m.scale
}
