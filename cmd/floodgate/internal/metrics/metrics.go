// Package metrics records what the limiter decides and how its store fares,
// for Prometheus (/metrics) and for the status page (Snapshot).
//
// A Recorder is fed one call of Observe per checked request. It keeps
// per-rule counters labelled by rule name and result, a latency histogram,
// store health and rule reloads in its own Prometheus registry, and, for the
// status page, recent per-rule rates and a bounded top-k of the keys that
// were rejected most (package topk). Counter keys are never metric labels:
// their number is unbounded.
package metrics

import (
	"math"
	"net/http"
	"runtime"
	runtimemetrics "runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/topk"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// Results a rule's decision is counted under, as the "result" label of
// floodgate_decisions_total.
const (
	ResultAllowed        = "allowed"
	ResultRejected       = "rejected"
	ResultShadowRejected = "shadow_rejected"
)

// Results a request is counted under, as the "result" label of
// floodgate_requests_total.
const (
	RequestAllowed   = "allowed"
	RequestRejected  = "rejected"
	RequestUnmatched = "unmatched" // no rule applied
	RequestError     = "error"     // the check failed (store error, bad request)
)

// Breaker states for StoreHealth.Breaker.
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half-open"
)

// TopKeys is how many rejected keys a Snapshot lists; TopCapacity is how many
// the sketch tracks to find them.
const (
	TopKeys     = 10
	TopCapacity = 200
)

// topHalfLife is how quickly old rejections fade from the top-k: counts are
// halved once per period.
const topHalfLife = time.Minute

// StoreHealth describes the counter store as the server sees it.
type StoreHealth struct {
	// Type is the store's kind: "memory", "redis" or "redis-cluster".
	Type string `json:"type"`
	// Arrangement is how nodes share counters: "local", "centralized",
	// "split" or "delayed".
	Arrangement string `json:"arrangement,omitempty"`
	// Up reports that the store answers.
	Up bool `json:"up"`
	// Breaker is the circuit breaker's state (one of the Breaker constants),
	// or empty when the store has none.
	Breaker string `json:"breaker,omitempty"`
	// Errors is the number of store operations that failed since start.
	Errors uint64 `json:"errors"`
	// SyncLag is, in delayed synchronization, how long ago the last
	// successful exchange with the shared store ended; zero otherwise.
	SyncLag time.Duration `json:"sync_lag_ns"`
	// Pending is the number of local counts not yet pushed to the shared
	// store (delayed synchronization, or counts taken during an outage).
	Pending int64 `json:"pending"`
	// Keys is the number of keys the store (or the local node) tracks.
	Keys int64 `json:"keys"`
	// KeysScope says what Keys counts when it is not the whole store's
	// keys: KeysLocalView with a shared Redis store. Empty means the store
	// itself (the memory store).
	KeysScope string `json:"keys_scope,omitempty"`
	// Detail is a short free-form note, such as the last error.
	Detail string `json:"detail,omitempty"`
	// Sync figures of a distributed node (zero otherwise): pushes sent
	// again under their identity, requests merged or dropped because the
	// pending queue was full, the queue's bytes, keys evicted from the
	// node's table, and decisions whose store call missed the adaptive
	// deadline with the deadline now.
	SyncResends uint64 `json:"sync_resends,omitempty"`
	SyncMerged  uint64 `json:"sync_merged,omitempty"`
	SyncDropped uint64 `json:"sync_dropped,omitempty"`
	// SyncOrphaned counts requests of keys seen once that the node's full
	// table evicted before their count was pushed (pushed later from the
	// orphan list, and charged from the eviction summary); SyncKeptViews counts pulls below the node's own
	// view (the store lost data); SyncRepushSkipped counts keys not pushed
	// again after such a loss.
	SyncOrphaned      uint64 `json:"sync_orphaned,omitempty"`
	SyncKeptViews     uint64 `json:"sync_kept_views,omitempty"`
	SyncRepushSkipped uint64 `json:"sync_repush_skipped,omitempty"`
	// SyncRetainForgotten counts evicted keys' pushed counts dropped from
	// the node's bounded list kept for a push again after a store loss.
	SyncRetainForgotten uint64 `json:"sync_retain_forgotten,omitempty"`
	// SyncLateAnswers counts syncs that missed their deadline and answered
	// later (a slow store, not a down one); SummaryCharged counts keys the
	// node's eviction summary charged when they were created.
	SyncLateAnswers uint64 `json:"sync_late_answers,omitempty"`
	// SyncDeferred counts accepted requests that found the pending queue
	// full and waited on their key for room (see SyncDropped for those
	// lost).
	SyncDeferred   uint64 `json:"sync_deferred,omitempty"`
	SummaryCharged uint64 `json:"summary_charged,omitempty"`
	// SummaryReads counts reads of Redis's count made for requests only
	// the summary's charge rejected, and SummarySettled the charges they
	// ended (the request then decided on Redis's count).
	SummaryReads      uint64 `json:"summary_reads,omitempty"`
	SummarySettled    uint64 `json:"summary_settled,omitempty"`
	SyncRepushPending int64  `json:"sync_repush_pending,omitempty"`
	// Nodes is the node count a distributed node's shares are computed
	// with; NodesLive reports that it is the live count (heartbeats), whose
	// last answer is RosterAge old (-1: none yet), with HeartbeatErrors
	// beats failed.
	Nodes           int           `json:"nodes,omitempty"`
	NodesLive       bool          `json:"nodes_live,omitempty"`
	RosterAge       time.Duration `json:"roster_age_ns,omitempty"`
	HeartbeatErrors uint64        `json:"heartbeat_errors,omitempty"`
	PendingBytes    int64         `json:"pending_bytes,omitempty"`
	Evictions       uint64        `json:"evictions,omitempty"`
	DeadlineMisses  uint64        `json:"deadline_misses,omitempty"`
	Deadline        time.Duration `json:"deadline_ns,omitempty"`
}

// KeysLocalView is the KeysScope of a node sharing a Redis store: Keys
// counts this node's local table, not the keys in Redis, which span every
// node.
const KeysLocalView = "this node's local view"

// Recorder collects metrics. It is safe for concurrent use. The zero value
// is not usable; call New.
type Recorder struct {
	reg   *prometheus.Registry
	start time.Time
	now   func() time.Time

	decisions *prometheus.CounterVec
	// warnings counts the keys that reached a rule's warning level, by rule.
	warnings *prometheus.CounterVec
	requests *prometheus.CounterVec
	latency  prometheus.Histogram
	reloads  *prometheus.CounterVec
	lastLoad prometheus.Gauge

	reqAllowed, reqRejected, reqUnmatched, reqError prometheus.Counter

	// unmatched counts requests no rule applied to by domain label
	// (domainLabel: a rule set's domain or "other").
	unmatched *unmatchedCounts

	// rules maps a rule name to its counters; it only grows (rule names
	// are bounded by the rule file).
	rulesMu sync.RWMutex
	rules   map[string]*ruleStats

	totals struct {
		allowed, rejected, unmatched, errors atomic.Uint64
		latencyNs                            atomic.Uint64
	}

	top *topk.Sketch

	storeMu   sync.Mutex
	store     StoreHealth
	storeFunc func() StoreHealth

	reloadOK, reloadFailed atomic.Uint64
	lastReload             atomic.Int64 // unix ns of the last successful reload

	// sampling for recent rates
	sampleMu  sync.Mutex
	samples   []sample
	lastDecay time.Time

	// history is the last hour of decisions, for the status page's chart.
	history history
}

type ruleStats struct {
	allowed, rejected, shadow       atomic.Uint64
	cAllowed, cRejected, cShadowRej prometheus.Counter
	cWarnings                       prometheus.Counter
}

// sample is the cumulative counts at one moment, to compute rates from.
type sample struct {
	at                                   time.Time
	allowed, rejected, unmatched, errors uint64
	latencyNs                            uint64
	// latencyLE and latencyCum are the latency histogram's bucket bounds
	// (seconds) and cumulative counts.
	latencyLE  []float64
	latencyCum []uint64
	rules      map[string][3]uint64
}

// Option configures a Recorder.
type Option func(*Recorder)

// WithClock makes the recorder read time from now instead of time.Now (for
// tests of rates and decay).
func WithClock(now func() time.Time) Option { return func(r *Recorder) { r.now = now } }

// New returns a Recorder with its own registry, which also holds the Go
// runtime and process collectors.
func New(opts ...Option) *Recorder {
	r := &Recorder{
		reg:   prometheus.NewRegistry(),
		now:   time.Now,
		rules: map[string]*ruleStats{},
		top:   topk.New(TopCapacity, 0),
	}
	for _, o := range opts {
		o(r)
	}
	r.start = r.now()
	r.lastDecay = r.start
	r.makeDecisionMetrics()
	r.reg.MustRegister(r.decisions, r.warnings, r.requests, r.unmatched.vec, r.latency, r.reloads, r.lastLoad,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.reg.MustRegister(&storeCollector{health: r.storeHealth}, buildInfo())
	return r
}

// makeDecisionMetrics makes the metrics of decisions, requests and rule
// reloads, with their fixed label values.
func (r *Recorder) makeDecisionMetrics() {
	r.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_decisions_total",
		Help: "Rule decisions by rule and result (allowed, rejected, shadow_rejected). A request counts once for every rule that applied to it.",
	}, []string{"rule", "result"})
	r.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_requests_total",
		Help: "Checked requests by result: allowed, rejected, unmatched (no rule applied) or error.",
	}, []string{"result"})
	r.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "floodgate_decision_duration_seconds",
		Help: "Time to decide a request, from the front end's call to the rule engine to its answer.",
		Buckets: []float64{.000005, .00001, .000025, .00005, .0001, .00025, .0005,
			.001, .0025, .005, .01, .025, .05, .1, .25, 1},
	})
	r.warnings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_rule_warnings_total",
		Help: "Keys that reached their rule's warning level (warn_at), by rule: one per call whose units took a key from below the level to it.",
	}, []string{"rule"})
	r.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_rule_reloads_total",
		Help: "Rule file reloads by result (success, failure). A failed reload keeps the previous rules.",
	}, []string{"result"})
	r.lastLoad = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "floodgate_rule_reload_last_success_timestamp_seconds",
		Help: "Unix time of the last successful rule load: the load at start, then each successful reload.",
	})
	r.unmatched = newUnmatchedCounts()
	r.reqAllowed = r.requests.WithLabelValues(RequestAllowed)
	r.reqRejected = r.requests.WithLabelValues(RequestRejected)
	r.reqUnmatched = r.requests.WithLabelValues(RequestUnmatched)
	r.reqError = r.requests.WithLabelValues(RequestError)
	r.reloads.WithLabelValues("success")
	r.reloads.WithLabelValues("failure")
}

// Registry returns the recorder's registry, so callers may add their own
// collectors.
func (r *Recorder) Registry() *prometheus.Registry { return r.reg }

// Handler returns the /metrics handler in the Prometheus text format (or
// OpenMetrics when the scraper asks for it).
func (r *Recorder) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{
		Registry:          r.reg,
		EnableOpenMetrics: true,
	})
}

func (r *Recorder) rule(name string) *ruleStats {
	r.rulesMu.RLock()
	rs := r.rules[name]
	r.rulesMu.RUnlock()
	if rs != nil {
		return rs
	}
	r.rulesMu.Lock()
	defer r.rulesMu.Unlock()
	if rs = r.rules[name]; rs == nil {
		rs = &ruleStats{
			cAllowed:   r.decisions.WithLabelValues(name, ResultAllowed),
			cRejected:  r.decisions.WithLabelValues(name, ResultRejected),
			cShadowRej: r.decisions.WithLabelValues(name, ResultShadowRejected),
			cWarnings:  r.warnings.WithLabelValues(name),
		}
		r.rules[name] = rs
	}
	return rs
}

// Observe records the outcome of one checked request and how long deciding
// it took: one decision per rule status, the request's overall result, the
// latency, and the keys of rejecting rules (shadow ones too) for the top-k.
func (r *Recorder) Observe(res rules.Result, elapsed time.Duration) {
	r.observeLatency(elapsed)
	switch {
	case len(res.Statuses) == 0:
		r.reqUnmatched.Inc()
		r.totals.unmatched.Add(1)
		r.unmatched.add(res)
	case res.Allowed:
		r.reqAllowed.Inc()
		r.totals.allowed.Add(1)
	default:
		r.reqRejected.Inc()
		r.totals.rejected.Add(1)
	}
	for i := range res.Statuses {
		st := &res.Statuses[i]
		rs := r.rule(st.Rule)
		switch {
		case st.Decision.Allowed:
			rs.allowed.Add(1)
			rs.cAllowed.Inc()
		case st.Shadow:
			rs.shadow.Add(1)
			rs.cShadowRej.Inc()
			r.top.Add(topKey(st.Rule, st.Key, true), 1)
		default:
			rs.rejected.Add(1)
			rs.cRejected.Inc()
			r.top.Add(topKey(st.Rule, st.Key, false), 1)
		}
		if st.CrossedWarning {
			rs.cWarnings.Inc()
		}
	}
}

// ObserveCharge records what a charge (a cost counted after the response)
// changed in metrics: the keys it took to their rule's warning level.
// Charges are not decisions, so nothing else is recorded.
func (r *Recorder) ObserveCharge(res rules.Result) {
	for i := range res.Statuses {
		if st := &res.Statuses[i]; st.CrossedWarning {
			r.rule(st.Rule).cWarnings.Inc()
		}
	}
}

// observeLatency adds one decision time to the histogram and to the total
// the status page's mean is taken from.
func (r *Recorder) observeLatency(elapsed time.Duration) {
	r.latency.Observe(elapsed.Seconds())
	if elapsed > 0 {
		r.totals.latencyNs.Add(uint64(elapsed))
	}
}

// ObserveError records a check that failed (the store could not decide, or
// the request was malformed) and how long it took.
func (r *Recorder) ObserveError(elapsed time.Duration) {
	r.observeLatency(elapsed)
	r.reqError.Inc()
	r.totals.errors.Add(1)
}

// topKey joins what the top-k tracks into one string: shadow flag, rule and
// counter key, separated by newlines (which rule names do not hold).
func topKey(rule, key string, shadow bool) string {
	s := "r"
	if shadow {
		s = "s"
	}
	return s + "\n" + rule + "\n" + key
}

func splitTopKey(k string) (rule, key string, shadow bool) {
	parts := strings.SplitN(k, "\n", 3)
	if len(parts) != 3 {
		return "", k, false
	}
	return parts[1], parts[2], parts[0] == "s"
}

// SetStore records the store's current health. It is for servers that push
// health as it changes; SetStoreFunc is the pull alternative.
func (r *Recorder) SetStore(h StoreHealth) {
	r.storeMu.Lock()
	r.store = h
	r.storeMu.Unlock()
}

// SetStoreFunc makes the recorder ask f for the store's health whenever it
// is needed (a scrape, a snapshot), instead of using the last SetStore. f
// must be safe for concurrent use and quick. A nil f reverts to SetStore.
func (r *Recorder) SetStoreFunc(f func() StoreHealth) {
	r.storeMu.Lock()
	r.storeFunc = f
	r.storeMu.Unlock()
}

func (r *Recorder) storeHealth() StoreHealth {
	r.storeMu.Lock()
	f, h := r.storeFunc, r.store
	r.storeMu.Unlock()
	if f != nil {
		return f()
	}
	return h
}

// RuleReload records a rule file reload: ok reports whether the new rules
// took effect.
func (r *Recorder) RuleReload(ok bool) {
	if ok {
		r.reloadOK.Add(1)
		r.reloads.WithLabelValues("success").Inc()
		now := r.now()
		r.lastReload.Store(now.UnixNano())
		r.lastLoad.Set(float64(now.UnixNano()) / 1e9)
		return
	}
	r.reloadFailed.Add(1)
	r.reloads.WithLabelValues("failure").Inc()
}

// RulesLoaded records that set is in force, at start or after a reload:
// the time of the last successful load, and every counter the set can
// move (its rules' decisions, its domains' unmatched requests) at 0, so
// that rate() and increase() see them from the start.
func (r *Recorder) RulesLoaded(set *rules.Set) {
	r.lastLoad.Set(float64(r.now().UnixNano()) / 1e9)
	for _, ri := range set.Rules() {
		r.rule(ri.Name)
	}
	r.unmatched.known(append(set.Domains(), otherDomain))
}

// Snapshot is the recorder's state for the status page, in a JSON-friendly
// form. Rates are over the last few seconds (RateWindow says exactly).
type Snapshot struct {
	// Time is when the snapshot was taken; Uptime is seconds since New.
	Time   time.Time `json:"time"`
	Uptime float64   `json:"uptime_s"`
	// RateWindow is the span, in seconds, the rates are measured over.
	RateWindow float64 `json:"rate_window_s"`
	// Requests sums every checked request.
	Requests RequestStats `json:"requests"`
	// Rules has one entry per rule that decided anything, by name.
	Rules []RuleStats `json:"rules"`
	// TopRejected lists the keys rejected most, most first (at most
	// TopKeys), with counts that halve every minute so recent rejections
	// dominate.
	TopRejected []TopKey `json:"top_rejected"`
	// Store is the counter store's health.
	Store StoreHealth `json:"store"`
	// Reloads counts rule reloads since start.
	Reloads ReloadStats `json:"reloads"`
	// Go runtime figures.
	Goroutines int    `json:"goroutines"`
	HeapBytes  uint64 `json:"heap_bytes"`
}

// RequestStats counts checked requests.
type RequestStats struct {
	Allowed   uint64 `json:"allowed"`
	Rejected  uint64 `json:"rejected"`
	Unmatched uint64 `json:"unmatched"`
	Errors    uint64 `json:"errors"`
	// ByDomain counts the unmatched requests (no rule applied, so not
	// limited) by domain: the rule set's domain they were checked in, or
	// "other" for domains no rule set has.
	ByDomain []UnmatchedStats `json:"unmatched_by_domain"`
	// PerSec is the recent rate of checked requests of every kind.
	PerSec float64 `json:"per_s"`
	// RejectedPerSec is the recent rate of rejected requests.
	RejectedPerSec float64 `json:"rejected_per_s"`
	// MeanLatencyMs is the recent mean decision time in milliseconds.
	MeanLatencyMs float64 `json:"mean_latency_ms"`
	// P99LatencyMs bounds the recent 99th percentile decision time from
	// above: the upper edge, in milliseconds, of the histogram bucket that
	// holds it (0 with no recent requests; +Inf is reported as -1).
	P99LatencyMs float64 `json:"p99_latency_ms"`
}

// RuleStats is one rule's decisions: totals since start and recent rates.
type RuleStats struct {
	Rule                 string  `json:"rule"`
	Allowed              uint64  `json:"allowed"`
	Rejected             uint64  `json:"rejected"`
	ShadowRejected       uint64  `json:"shadow_rejected"`
	AllowedPerSec        float64 `json:"allowed_per_s"`
	RejectedPerSec       float64 `json:"rejected_per_s"`
	ShadowRejectedPerSec float64 `json:"shadow_rejected_per_s"`
}

// TopKey is one frequently rejected counter key.
type TopKey struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
	// Shadow reports rejections by a shadow rule (not enforced).
	Shadow bool `json:"shadow,omitempty"`
	// Count is the decayed number of rejections, an overestimate by at most
	// Err.
	Count uint64 `json:"count"`
	Err   uint64 `json:"err,omitempty"`
}

// ReloadStats counts rule reloads.
type ReloadStats struct {
	OK     uint64 `json:"ok"`
	Failed uint64 `json:"failed"`
	// Last is the time of the last successful reload, if any.
	Last *time.Time `json:"last,omitempty"`
}

// rateWindow is the span rates are computed over; samples are kept at least
// sampleEvery apart.
const (
	rateWindow  = 5 * time.Second
	sampleEvery = time.Second
	maxSamples  = 16
)

func (r *Recorder) current(at time.Time) sample {
	s := sample{
		at:        at,
		allowed:   r.totals.allowed.Load(),
		rejected:  r.totals.rejected.Load(),
		unmatched: r.totals.unmatched.Load(),
		errors:    r.totals.errors.Load(),
		latencyNs: r.totals.latencyNs.Load(),
		rules:     map[string][3]uint64{},
	}
	var m dto.Metric
	if err := r.latency.Write(&m); err == nil && m.Histogram != nil {
		for _, b := range m.Histogram.Bucket {
			s.latencyLE = append(s.latencyLE, b.GetUpperBound())
			s.latencyCum = append(s.latencyCum, b.GetCumulativeCount())
		}
		s.latencyLE = append(s.latencyLE, math.Inf(1))
		s.latencyCum = append(s.latencyCum, m.Histogram.GetSampleCount())
	}
	r.rulesMu.RLock()
	for name, rs := range r.rules {
		s.rules[name] = [3]uint64{rs.allowed.Load(), rs.rejected.Load(), rs.shadow.Load()}
	}
	r.rulesMu.RUnlock()
	return s
}

// Snapshot returns the current figures. Rates compare the counts now with
// the counts of the oldest kept sample at most about five seconds old (or,
// right after start, with zero at start).
func (r *Recorder) Snapshot() Snapshot {
	now := r.now()
	cur := r.current(now)
	base := r.keepSample(now, cur)
	dt := now.Sub(base.at).Seconds()
	rate := func(a, b uint64) float64 {
		if dt <= 0 || a < b {
			return 0
		}
		return float64(a-b) / dt
	}
	snap := Snapshot{
		Time:       now,
		Uptime:     now.Sub(r.start).Seconds(),
		RateWindow: dt,
		Requests: RequestStats{
			Allowed:   cur.allowed,
			Rejected:  cur.rejected,
			Unmatched: cur.unmatched,
			Errors:    cur.errors,
			ByDomain:  r.unmatched.snapshot(),
		},
		Store: r.storeHealth(),
		Reloads: ReloadStats{
			OK:     r.reloadOK.Load(),
			Failed: r.reloadFailed.Load(),
		},
		Goroutines: runtime.NumGoroutine(),
	}
	total := cur.allowed + cur.rejected + cur.unmatched + cur.errors
	baseTotal := base.allowed + base.rejected + base.unmatched + base.errors
	snap.Requests.PerSec = rate(total, baseTotal)
	snap.Requests.RejectedPerSec = rate(cur.rejected, base.rejected)
	if n := total - baseTotal; n > 0 && cur.latencyNs >= base.latencyNs {
		snap.Requests.MeanLatencyMs = float64(cur.latencyNs-base.latencyNs) / float64(n) / 1e6
	}
	snap.Requests.P99LatencyMs = quantileBound(base, cur, 0.99)
	if ns := r.lastReload.Load(); ns != 0 {
		t := time.Unix(0, ns)
		snap.Reloads.Last = &t
	}
	snap.Rules = ruleRates(base, cur, rate)
	snap.TopRejected = r.topRejected()
	if snap.Rules == nil {
		snap.Rules = []RuleStats{}
	}
	if snap.TopRejected == nil {
		snap.TopRejected = []TopKey{}
	}
	snap.HeapBytes = heapBytes()
	return snap
}

// keepSample keeps cur (taken at now) among the rate samples if the newest
// is at least sampleEvery old, drops samples older than the window, fades
// the top-k, and returns the base sample rates are computed against.
func (r *Recorder) keepSample(now time.Time, cur sample) sample {
	r.sampleMu.Lock()
	defer r.sampleMu.Unlock()
	base := sample{at: r.start}
	// Drop samples older than the window, keeping the newest of them as the
	// base if nothing younger is left.
	for len(r.samples) > 1 && now.Sub(r.samples[1].at) >= rateWindow {
		r.samples = r.samples[1:]
	}
	if len(r.samples) > 0 {
		base = r.samples[0]
	}
	if len(r.samples) == 0 || now.Sub(r.samples[len(r.samples)-1].at) >= sampleEvery {
		if len(r.samples) >= maxSamples {
			r.samples = r.samples[1:]
		}
		r.samples = append(r.samples, cur)
	}
	// Fade the top-k: halve once per half-life that has passed.
	for now.Sub(r.lastDecay) >= topHalfLife {
		r.top.Decay(1, 2)
		r.lastDecay = r.lastDecay.Add(topHalfLife)
	}
	return base
}

// ruleRates is each rule's counts in cur and their rates since base, by
// rule name.
func ruleRates(base, cur sample, rate func(a, b uint64) float64) []RuleStats {
	var out []RuleStats
	for name, c := range cur.rules {
		b := base.rules[name]
		out = append(out, RuleStats{
			Rule: name, Allowed: c[0], Rejected: c[1], ShadowRejected: c[2],
			AllowedPerSec:        rate(c[0], b[0]),
			RejectedPerSec:       rate(c[1], b[1]),
			ShadowRejectedPerSec: rate(c[2], b[2]),
		})
	}
	slices.SortFunc(out, func(a, b RuleStats) int { return strings.Compare(a.Rule, b.Rule) })
	return out
}

// topRejected is the most rejected keys now.
func (r *Recorder) topRejected() []TopKey {
	var out []TopKey
	for _, e := range r.top.Top(TopKeys) {
		rule, key, shadow := splitTopKey(e.Key)
		out = append(out, TopKey{Rule: rule, Key: key, Shadow: shadow, Count: e.Count, Err: e.Err})
	}
	return out
}

// heapBytes is the size of the heap's objects; runtime/metrics reads it
// without stopping the world.
func heapBytes() uint64 {
	heap := []runtimemetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	runtimemetrics.Read(heap)
	if heap[0].Value.Kind() == runtimemetrics.KindUint64 {
		return heap[0].Value.Uint64()
	}
	return 0
}

// quantileBound returns the upper edge, in milliseconds, of the latency
// bucket holding quantile q of the observations made between base and cur;
// 0 if there were none, -1 if it is the unbounded last bucket.
func quantileBound(base, cur sample, q float64) float64 {
	n := len(cur.latencyCum)
	if n == 0 {
		return 0
	}
	baseCum := func(i int) uint64 {
		if len(base.latencyCum) == n {
			return base.latencyCum[i]
		}
		return 0
	}
	total := cur.latencyCum[n-1] - baseCum(n-1)
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	for i := range n {
		if cur.latencyCum[i]-baseCum(i) >= rank {
			if math.IsInf(cur.latencyLE[i], 1) {
				return -1
			}
			return cur.latencyLE[i] * 1e3
		}
	}
	return -1
}
