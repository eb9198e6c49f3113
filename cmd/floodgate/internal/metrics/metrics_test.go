package metrics

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func status(rule, key string, allowed, shadow bool) rules.Status {
	return rules.Status{
		Rule: rule, Key: key, Limit: 600, Window: time.Minute, Algorithm: algorithm.BoundedLog,
		Shadow: shadow, Decision: algorithm.Decision{Allowed: allowed, Limit: 600},
	}
}

func result(sts ...rules.Status) rules.Result {
	res := rules.Result{Allowed: true, Statuses: sts, Tightest: -1}
	for _, st := range sts {
		if !st.Decision.Allowed {
			if !st.Shadow {
				res.Allowed = false
			}
			res.Rejected = append(res.Rejected, st.Rule)
		}
	}
	return res
}

// scrape reads /metrics and returns every sample line as name{labels} ->
// value.
func scrape(t *testing.T, r *Recorder) map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

func TestObserveCountsByRuleAndResult(t *testing.T) {
	r := New()
	for range 3 {
		r.Observe(result(status("per-client", "default|per-client|client=acme", true, false),
			status("per-ip", "default|per-ip|ip=10.0.0.1", true, false)), 100*time.Microsecond)
	}
	r.Observe(result(status("per-client", "default|per-client|client=acme", false, false),
		status("per-ip", "default|per-ip|ip=10.0.0.1", true, false)), 3*time.Millisecond)
	r.Observe(result(status("audit", "default|audit|client=bob", false, true)), time.Microsecond)
	r.Observe(rules.Result{Allowed: true, Tightest: -1}, time.Microsecond)
	r.ObserveError(time.Second)

	m := scrape(t, r)
	want := map[string]float64{
		`floodgate_decisions_total{result="allowed",rule="per-client"}`:         3,
		`floodgate_decisions_total{result="rejected",rule="per-client"}`:        1,
		`floodgate_decisions_total{result="shadow_rejected",rule="per-client"}`: 0,
		`floodgate_decisions_total{result="allowed",rule="per-ip"}`:             4,
		`floodgate_decisions_total{result="shadow_rejected",rule="audit"}`:      1,
		`floodgate_decisions_total{result="rejected",rule="audit"}`:             0,
		`floodgate_requests_total{result="allowed"}`:                            4, // 3 + the shadow-only one
		`floodgate_requests_total{result="rejected"}`:                           1,
		`floodgate_requests_total{result="unmatched"}`:                          1,
		`floodgate_requests_total{result="error"}`:                              1,
		`floodgate_decision_duration_seconds_count`:                             7,
		`floodgate_decision_duration_seconds_bucket{le="0.0001"}`:               5,
		`floodgate_decision_duration_seconds_bucket{le="0.005"}`:                6,
		`floodgate_rule_reloads_total{result="success"}`:                        0,
	}
	for k, v := range want {
		got, ok := m[k]
		if !ok {
			t.Errorf("missing %s", k)
		} else if got != v {
			t.Errorf("%s = %v, want %v", k, got, v)
		}
	}
	// No counter key may leak into a label.
	for k := range m {
		if strings.Contains(k, "acme") || strings.Contains(k, "10.0.0.1") || strings.Contains(k, "bob") {
			t.Errorf("per-key label in %s", k)
		}
	}
	if _, ok := m["go_goroutines"]; !ok {
		t.Error("Go runtime collector missing")
	}
}

func TestStoreHealth(t *testing.T) {
	r := New()
	r.SetStore(StoreHealth{Type: "redis", Arrangement: "delayed", Up: false, Breaker: BreakerOpen,
		Errors: 42, SyncLag: 1500 * time.Millisecond, Pending: 7, Keys: 1000})
	m := scrape(t, r)
	for k, v := range map[string]float64{
		"floodgate_store_up": 0, "floodgate_store_errors_total": 42,
		`floodgate_store_breaker_state{state="open"}`: 1, `floodgate_store_breaker_state{state="closed"}`: 0,
		`floodgate_store_breaker_state{state="half_open"}`: 0,
		"floodgate_sync_lag_seconds":                       1.5, "floodgate_sync_pending": 7, "floodgate_keys_tracked": 1000,
	} {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if s := r.Snapshot().Store; s.Type != "redis" || s.Breaker != BreakerOpen || s.Errors != 42 {
		t.Errorf("snapshot store %+v", s)
	}

	// A health function takes over and is read at scrape time.
	var keys int64 = 5
	r.SetStoreFunc(func() StoreHealth { return StoreHealth{Type: "memory", Up: true, Keys: keys} })
	keys = 9
	m = scrape(t, r)
	if m["floodgate_store_up"] != 1 || m["floodgate_keys_tracked"] != 9 {
		t.Errorf("after SetStoreFunc: up %v keys %v", m["floodgate_store_up"], m["floodgate_keys_tracked"])
	}
	if s := r.Snapshot().Store; s.Type != "memory" || s.Keys != 9 {
		t.Errorf("snapshot store %+v", s)
	}
}

// TestStoreSeriesByArrangement checks that each store and arrangement
// exports the series that mean something for it, and only those.
func TestStoreSeriesByArrangement(t *testing.T) {
	for _, c := range []struct {
		h                    StoreHealth
		breaker, node, queue bool
		delayed              bool
	}{
		{StoreHealth{Type: "memory", Arrangement: "local", Up: true}, false, false, false, false},
		{StoreHealth{Type: "redis", Arrangement: "split", Up: true, Breaker: BreakerClosed}, true, true, false, false},
		{StoreHealth{Type: "redis", Arrangement: "centralized", Up: true, Breaker: BreakerHalfOpen}, true, true, true, false},
		{StoreHealth{Type: "redis", Arrangement: "delayed", Up: true, Breaker: BreakerClosed}, true, true, true, true},
	} {
		t.Run(c.h.Arrangement, func(t *testing.T) {
			r := New()
			r.SetStore(c.h)
			m := scrape(t, r)
			has := func(name string) bool { _, ok := m[name]; return ok }
			for name, want := range map[string]bool{
				"floodgate_store_up": true, "floodgate_keys_tracked": true, "floodgate_store_errors_total": true,
				`floodgate_store_breaker_state{state="closed"}`: c.breaker,
				"floodgate_node_evictions_total":                c.node, "floodgate_store_deadline_seconds": c.node,
				"floodgate_sync_pending": c.queue, "floodgate_sync_dropped_total": c.queue,
				"floodgate_sync_lag_seconds": c.delayed, "floodgate_sync_orphaned_total": c.delayed,
			} {
				if has(name) != want {
					t.Errorf("%s exported: %v, want %v", name, has(name), want)
				}
			}
			if c.breaker {
				var sum float64
				for _, st := range []string{"closed", "half_open", "open"} {
					sum += m[`floodgate_store_breaker_state{state="`+st+`"}`]
				}
				if sum != 1 {
					t.Errorf("breaker states sum to %v, want exactly one state at 1", sum)
				}
			}
		})
	}
}

func TestBuildInfo(t *testing.T) {
	m := scrape(t, New())
	for k, v := range m {
		if strings.HasPrefix(k, "floodgate_build_info{") {
			if v != 1 || !strings.Contains(k, `goversion="go`) || !strings.Contains(k, "revision=") || !strings.Contains(k, "version=") {
				t.Errorf("%s %v", k, v)
			}
			return
		}
	}
	t.Error("floodgate_build_info missing")
}

func TestRulesLoaded(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	r := New(WithClock(clk.now))
	set, err := rules.Parse("rules.yaml", []byte("domain: shop\nrules:\n  - {name: login, match: {path: {prefix: /login}}, count_by: [ip], limit: 5, window: 1m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r.RulesLoaded(set)
	m := scrape(t, r)
	for k, v := range map[string]float64{
		"floodgate_rule_reload_last_success_timestamp_seconds":      1_700_000_000,
		`floodgate_decisions_total{result="allowed",rule="login"}`:  0,
		`floodgate_decisions_total{result="rejected",rule="login"}`: 0,
		`floodgate_unmatched_requests_total{domain="shop"}`:         0,
		`floodgate_unmatched_requests_total{domain="other"}`:        0,
		`floodgate_rule_warnings_total{rule="login"}`:               0,
	} {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if u := r.Snapshot().Requests.ByDomain; len(u) != 0 {
		t.Errorf("status page lists unmatched domains that counted nothing: %+v", u)
	}
}

func TestRuleReloads(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	r := New(WithClock(clk.now))
	r.RuleReload(true)
	r.RuleReload(false)
	r.RuleReload(false)
	m := scrape(t, r)
	if m[`floodgate_rule_reloads_total{result="success"}`] != 1 ||
		m[`floodgate_rule_reloads_total{result="failure"}`] != 2 ||
		m["floodgate_rule_reload_last_success_timestamp_seconds"] != 1_700_000_000 {
		t.Errorf("reload metrics: %v %v %v", m[`floodgate_rule_reloads_total{result="success"}`],
			m[`floodgate_rule_reloads_total{result="failure"}`], m["floodgate_rule_reload_last_success_timestamp_seconds"])
	}
	s := r.Snapshot().Reloads
	if s.OK != 1 || s.Failed != 2 || s.Last == nil || !s.Last.Equal(clk.now()) {
		t.Errorf("snapshot reloads %+v", s)
	}
}

// TestSnapshotRates drives a fake clock: 100 requests/s for rule a, 20/s
// rejected for rule b, and checks the recent rates follow a change in
// traffic within the rate window.
func TestSnapshotRates(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	r := New(WithClock(clk.now))
	step := func(seconds int, aPerSec, bRejPerSec int) {
		for range seconds {
			for range aPerSec {
				r.Observe(result(status("a", "k", true, false)), time.Millisecond)
			}
			for range bRejPerSec {
				r.Observe(result(status("b", "k", false, false)), time.Millisecond)
			}
			clk.advance(time.Second)
			r.Snapshot() // the page polls once a second
		}
	}
	step(10, 100, 20)
	s := r.Snapshot()
	if len(s.Rules) != 2 || s.Rules[0].Rule != "a" || s.Rules[1].Rule != "b" {
		t.Fatalf("rules %+v", s.Rules)
	}
	if got := s.Rules[0].AllowedPerSec; got < 99 || got > 101 {
		t.Errorf("a allowed/s = %v, want 100", got)
	}
	if got := s.Rules[1].RejectedPerSec; got < 19 || got > 21 {
		t.Errorf("b rejected/s = %v, want 20", got)
	}
	if got := s.Requests.PerSec; got < 119 || got > 121 {
		t.Errorf("requests/s = %v, want 120", got)
	}
	if s.Requests.MeanLatencyMs < 0.99 || s.Requests.MeanLatencyMs > 1.01 {
		t.Errorf("mean latency %v ms, want 1", s.Requests.MeanLatencyMs)
	}
	if s.Rules[0].Allowed != 1000 || s.Rules[1].Rejected != 200 || s.Requests.Rejected != 200 {
		t.Errorf("totals: %+v %+v", s.Rules, s.Requests)
	}
	if s.RateWindow < 4.9 || s.RateWindow > 6.1 {
		t.Errorf("rate window %v s", s.RateWindow)
	}
	// Traffic stops: within the window the rates fall to zero.
	step(7, 0, 0)
	s = r.Snapshot()
	if s.Rules[0].AllowedPerSec != 0 || s.Requests.PerSec != 0 {
		t.Errorf("after traffic stopped: %+v", s.Rules[0])
	}
	if s.Uptime != 17 {
		t.Errorf("uptime %v", s.Uptime)
	}
}

// TestRecentP99 checks the p99 bound follows the recent latencies: 990 fast
// and 10 slow decisions leave p99 in the fast bucket; 20 slow ones move it to
// the slow bucket; once those age out of the window it falls back.
func TestRecentP99(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	r := New(WithClock(clk.now))
	ok := result(status("a", "k", true, false))
	if got := r.Snapshot().Requests.P99LatencyMs; got != 0 {
		t.Errorf("p99 with no requests = %v", got)
	}
	for range 990 {
		r.Observe(ok, 8*time.Microsecond)
	}
	for range 10 {
		r.Observe(ok, 3*time.Millisecond)
	}
	if got := r.Snapshot().Requests.P99LatencyMs; got != 0.01 {
		t.Errorf("p99 bound = %v ms, want 0.01 (the 10 µs bucket)", got)
	}
	for range 10 {
		r.Observe(ok, 3*time.Millisecond)
	}
	if got := r.Snapshot().Requests.P99LatencyMs; got != 5 {
		t.Errorf("p99 bound = %v ms, want 5 (the 2.5-5 ms bucket)", got)
	}
	// Ten quiet seconds, then fast traffic only: the slow calls are out of
	// the rate window.
	for range 10 {
		clk.advance(time.Second)
		r.Snapshot()
	}
	for range 100 {
		r.Observe(ok, 20*time.Microsecond)
	}
	if got := r.Snapshot().Requests.P99LatencyMs; got != 0.025 {
		t.Errorf("p99 bound after the window moved = %v ms, want 0.025", got)
	}
	r.Observe(ok, 2*time.Second)
	r.Observe(ok, 2*time.Second)
	if got := r.Snapshot().Requests.P99LatencyMs; got != -1 {
		t.Errorf("p99 in the +Inf bucket = %v, want -1", got)
	}
}

func TestTopRejectedKeys(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	r := New(WithClock(clk.now))
	// One abusive client, one shadow-rejected client, and many clients
	// rejected once each, far more than the sketch holds.
	for i := range 5000 {
		r.Observe(result(status("per-client", fmt.Sprintf("d|per-client|client=c%d", i), false, false)), 0)
		if i%5 == 0 {
			r.Observe(result(status("per-client", "d|per-client|client=abuser", false, false)), 0)
		}
		if i%10 == 0 {
			r.Observe(result(status("audit", "d|audit|client=noisy", false, true)), 0)
		}
	}
	s := r.Snapshot()
	if len(s.TopRejected) != TopKeys {
		t.Fatalf("%d top keys, want %d", len(s.TopRejected), TopKeys)
	}
	first, second := s.TopRejected[0], s.TopRejected[1]
	if first.Key != "d|per-client|client=abuser" || first.Rule != "per-client" || first.Shadow || first.Count < 1000 {
		t.Errorf("top key %+v, want the abuser with >= 1000", first)
	}
	if second.Key != "d|audit|client=noisy" || second.Rule != "audit" || !second.Shadow || second.Count < 500 {
		t.Errorf("second key %+v, want the shadow-rejected noisy client", second)
	}
	// Counts halve every minute without traffic.
	before := first.Count
	clk.advance(2 * time.Minute)
	s = r.Snapshot()
	if got := s.TopRejected[0].Count; got != before/4 {
		t.Errorf("after two minutes top count %d, want %d", got, before/4)
	}
}

func TestSnapshotJSON(t *testing.T) {
	r := New()
	r.Observe(result(status("per-client", "k", false, false)), time.Millisecond)
	b, err := json.Marshal(r.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"time", "requests", "rules", "top_rejected", "store", "reloads", "rate_window_s"} {
		if _, ok := m[k]; !ok {
			t.Errorf("snapshot JSON lacks %q: %s", k, b)
		}
	}
	// Empty lists are [] not null, so the page's code can iterate them.
	b, _ = json.Marshal(New().Snapshot())
	if !strings.Contains(string(b), `"rules":[]`) || !strings.Contains(string(b), `"top_rejected":[]`) {
		t.Errorf("empty snapshot: %s", b)
	}
}

func TestConcurrentUse(t *testing.T) {
	r := New()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				rule := fmt.Sprintf("rule-%d", i%3)
				r.Observe(result(status(rule, fmt.Sprintf("k%d", (g*7+i)%50), i%4 != 0, false)), time.Microsecond)
				if i%500 == 0 {
					r.Snapshot()
					r.SetStore(StoreHealth{Type: "memory", Up: true, Keys: int64(i)})
					r.RuleReload(i%1000 == 0)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 5 {
			srv := httptest.NewServer(r.Handler())
			resp, err := srv.Client().Get(srv.URL)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			srv.Close()
		}
	}()
	wg.Wait()
	s := r.Snapshot()
	var allowed, rejected uint64
	for _, rs := range s.Rules {
		allowed += rs.Allowed
		rejected += rs.Rejected
	}
	if allowed != 6000 || rejected != 2000 {
		t.Fatalf("allowed %d rejected %d, want 6000 and 2000", allowed, rejected)
	}
}

func BenchmarkObserveAllowed(b *testing.B) {
	r := New()
	res := result(status("per-client", "default|per-client|client=acme", true, false))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Observe(res, 50*time.Microsecond)
		}
	})
}

func BenchmarkObserveRejected(b *testing.B) {
	r := New()
	res := result(status("per-client", "default|per-client|client=acme", false, false))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Observe(res, 50*time.Microsecond)
		}
	})
}

// BenchmarkCheckWithObserve measures what recording adds to a real decision:
// the default rules over the memory store, 1,000 clients, with and without
// Observe.
func BenchmarkCheckWithObserve(b *testing.B) {
	for _, observe := range []bool{false, true} {
		name := "check-only"
		if observe {
			name = "check+observe"
		}
		b.Run(name, func(b *testing.B) {
			eng := rules.NewEngine(rules.Default(), memstore.New(memstore.Options{}))
			rec := New()
			reqs := make([]rules.Request, 1000)
			for i := range reqs {
				reqs[i] = rules.Request{Domain: "default", Descriptors: []rules.Descriptor{{{Key: "client", Value: fmt.Sprintf("client-%d", i)}}}}
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					start := time.Now()
					res, err := eng.Check(ctx, reqs[i%len(reqs)])
					if err != nil {
						b.Error(err)
						return
					}
					if observe {
						rec.Observe(res, time.Since(start))
					}
				}
			})
		})
	}
}

// TestRuleWarnings: a crossing of a rule's warning level counts once for its
// rule, on a check or a charge; a status in warning that did not cross
// counts nothing.
func TestRuleWarnings(t *testing.T) {
	r := New()
	crossed := rules.Result{Allowed: true, Statuses: []rules.Status{
		{Rule: "monthly", Warning: true, CrossedWarning: true, Decision: algorithm.Decision{Allowed: true}},
		{Rule: "daily", Warning: true, Decision: algorithm.Decision{Allowed: true}},
	}}
	r.Observe(crossed, time.Millisecond)
	r.ObserveCharge(crossed)
	m := scrape(t, r)
	if m[`floodgate_rule_warnings_total{rule="monthly"}`] != 2 || m[`floodgate_rule_warnings_total{rule="daily"}`] != 0 {
		t.Fatalf("warnings: monthly %v, daily %v; want 2 and 0", m[`floodgate_rule_warnings_total{rule="monthly"}`],
			m[`floodgate_rule_warnings_total{rule="daily"}`])
	}
	if m[`floodgate_requests_total{result="allowed"}`] != 1 {
		t.Fatalf("a charge counted as a request: %v", m[`floodgate_requests_total{result="allowed"}`])
	}
}
