package main

// The soak and chaos run: the real binary under mixed load (RLS, JSON API
// and gateway; honest clients, greedy clients and a flood of new keys) while
// Redis is paused and killed and the rule file is rewritten, asserting the
// promise at the end. The test suite runs it for FLOODGATE_SOAK (default
// 45s, faults compressed to fit); scripts/soak runs it for 30 minutes.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/internal/testkit/testtier"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/store"
)

// Soak limits: honest clients send well under L per W, greedy ones far over.
const (
	soakLimit    = 40
	soakWindow   = 5 * time.Second
	soakEpsilon  = 0.05 // the rule file sets no tolerance: bounded-log's default
	honestPerSec = 5    // 25 per window, under 40
	greedyPerSec = 40   // 200 per window
	ledgerKeys   = 50
	// soakTableBytes bounds the node's table (arrangement.max_bytes) so
	// that the flood fills it within the first third of the run: flat heap
	// over the last two thirds is only a claim about a table at its bound,
	// and the default 512 MiB takes even an uncapped flood about 40 s to
	// fill. FLOODGATE_SOAK_TABLE_BYTES overrides it (scripts/soak: 128 MiB).
	// The pending queue is bounded to half of it (scripts/soak: 64 MiB, the
	// default), so the lists of evicted keys' kept counts (a quarter of the
	// queue's bound each) also reach their bound within the first third.
	soakTableBytes = 16 << 20
)

// soakTable is the node's table bound for this run.
func soakTable() int64 {
	if v, err := strconv.ParseInt(os.Getenv("FLOODGATE_SOAK_TABLE_BYTES"), 10, 64); err == nil && v > 0 {
		return v
	}
	return soakTableBytes
}

// soakRules is the rule file; reload flips the comment line so every rewrite
// is a real change and a real reload.
func soakRules(version int) string {
	return fmt.Sprintf(`# version %d
domain: soak
rules:
  - name: per-client
    match: {client: "*"}
    count_by: [client]
    limit: %d
    window: %s
  - name: per-api-key
    match: {"header:x-api-key": "*"}
    count_by: ["header:x-api-key"]
    limit: %d
    window: %s
  - name: ledger
    algorithm: fixed-window
    match: {ledger: "*"}
    count_by: [ledger]
    limit: 100000000
    window: 8760h
  - name: flood
    algorithm: fixed-window
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 5
    window: 1h
`, version, soakLimit, soakWindow, soakLimit, soakWindow)
}

// soakRun is one run's shared state.
type soakRun struct {
	t      *testing.T
	ctx    context.Context // the load's; errors after it ends are not counted
	start  time.Time
	bin    string
	dir    string
	redis  *redistest.Server
	cmd    *exec.Cmd
	http   string // http://addr of the API listener
	grpc   string
	gw     string
	conn   *grpc.ClientConn
	rs     *redisstore.Store
	client rlsv3.RateLimitServiceClient

	mu      sync.Mutex
	faults  []faultWindow
	errs    []callError
	samples []sample

	phase       atomic.Int64 // ledger key namespace, bumped at each Redis kill
	ledgerMu    sync.Mutex
	ledgerOK    map[string]int64 // phase/key -> OK answers
	ledgerLost  map[string]int64 // phase/key -> calls without an answer (the server may have counted them)
	reloads     atomic.Int64
	flooded     atomic.Int64
	honestCalls atomic.Int64
}

type faultWindow struct {
	what       string
	start, end time.Time
}

type callError struct {
	at   time.Time
	what string
	err  string
}

type sample struct {
	at         time.Duration
	heap, rss  float64
	heapGoal   float64 // the collector's goal: in proportion to the heap live after the last GC
	goroutines float64
	keys       float64
}

func soakDuration(t *testing.T) time.Duration {
	v := os.Getenv("FLOODGATE_SOAK")
	if v == "" {
		return 45 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 20*time.Second {
		t.Fatalf("FLOODGATE_SOAK=%q: want a duration of at least 20s", v)
	}
	return d
}

func TestSoak(t *testing.T) {
	if os.Getenv("FLOODGATE_SOAK") == "" { // scripts/soak sets it
		testtier.RequireIntegration(t, "45 s of load and chaos on the real binary")
	}
	total := soakDuration(t)
	r := &soakRun{t: t, dir: t.TempDir(), ledgerOK: map[string]int64{}, ledgerLost: map[string]int64{}}
	r.bin = floodgateBinary(t)
	r.redis = redistest.Start(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer upstream.Close()
	r.startServer(upstream.URL)
	defer r.cmd.Process.Kill()
	conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r.conn, r.client = conn, rlsv3.NewRateLimitServiceClient(conn)
	r.start = time.Now()

	ctx, cancel := context.WithTimeout(context.Background(), total)
	defer cancel()
	r.ctx = ctx
	greedy := make([][]time.Time, 3)
	honest := make([]int64, 12) // rejections per honest client
	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	for i := range honest {
		run(func() { honest[i] = r.honestClient(ctx, i) })
	}
	for i := range greedy {
		run(func() { greedy[i] = r.greedyClient(ctx, i) })
	}
	run(func() { r.ledgerClient(ctx) })
	run(func() { r.flood(ctx) })
	run(func() { r.reloadLoop(ctx) })
	run(func() { r.sampleLoop(ctx) })
	r.chaos(ctx, total)
	wg.Wait()
	r.settle()
	if m, err := scrape(r.http + "/metrics"); err == nil {
		var names []string
		for name, v := range m {
			if strings.Contains(name, "sync") || strings.Contains(name, "evict") || strings.Contains(name, "store_") {
				names = append(names, fmt.Sprintf("%s %.0f", name, v))
			}
		}
		slices.Sort(names)
		t.Logf("server metrics after the load:\n  %s", strings.Join(names, "\n  "))
	}
	r.report(total, honest, greedy)
}

// startServer writes the config and rules and starts `floodgate serve`
// against Redis in the delayed arrangement.
func (r *soakRun) startServer(upstream string) {
	t := r.t
	rulesPath := filepath.Join(r.dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(soakRules(0)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`http:
  addr: 127.0.0.1:0
grpc:
  addr: 127.0.0.1:0
rules: %s
store:
  type: redis
  addrs: [%s]
arrangement:
  mode: delayed
  max_bytes: %d
  max_pending_bytes: %d
gateway:
  addr: 127.0.0.1:0
  descriptors: ["header:x-api-key"]
  routes:
    - prefix: /
      upstream: %s
log:
  level: info
`, rulesPath, r.redis.Addr(), soakTable(), soakTable()/2, upstream)
	cfgPath := filepath.Join(r.dir, "floodgate.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(r.bin, "serve", "--config", cfgPath)
	stderr, _ := r.cmd.StderrPipe()
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listen := regexp.MustCompile(`msg=listening listener=(\w+) addr=(\S+)`)
	sc := bufio.NewScanner(stderr)
	deadline := time.Now().Add(30 * time.Second)
	var seen []string
	for (r.http == "" || r.grpc == "" || r.gw == "") && time.Now().Before(deadline) && sc.Scan() {
		seen = append(seen, sc.Text())
		if m := listen.FindStringSubmatch(sc.Text()); m != nil {
			switch m[1] {
			case "http":
				r.http = m[2]
			case "grpc":
				r.grpc = m[2]
			case "gateway":
				r.gw = m[2]
			}
		}
	}
	if r.http == "" || r.grpc == "" || r.gw == "" {
		t.Fatalf("serve did not report its three listeners:\n%s", strings.Join(seen, "\n"))
	}
	var logTo io.Writer = io.Discard
	if path := os.Getenv("FLOODGATE_SOAK_SERVER_LOG"); path != "" {
		if f, err := os.Create(path); err == nil {
			logTo = f
		}
	}
	go func() { // keep draining the log; count reloads
		for sc.Scan() {
			fmt.Fprintln(logTo, sc.Text())
			if strings.Contains(sc.Text(), "rules: reloaded") {
				r.reloads.Add(1)
			}
		}
	}()
	for time.Now().Before(deadline) {
		if resp, err := http.Get(r.http + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("serve never became ready")
}

// rlsCheck sends one ShouldRateLimit with one descriptor per entry list.
func (r *soakRun) rlsCheck(ctx context.Context, descs ...[][2]string) (bool, error) {
	req := &rlsv3.RateLimitRequest{Domain: "soak"}
	for _, d := range descs {
		var pd commonrl.RateLimitDescriptor
		for _, e := range d {
			pd.Entries = append(pd.Entries, &commonrl.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
		}
		req.Descriptors = append(req.Descriptors, &pd)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := r.client.ShouldRateLimit(cctx, req)
	if err != nil {
		return false, err
	}
	return resp.OverallCode == rlsv3.RateLimitResponse_OK, nil
}

// jsonCheck asks POST /v1/check for one client.
func (r *soakRun) jsonCheck(ctx context.Context, client string) (bool, error) {
	body := fmt.Sprintf(`{"domain":"soak","descriptors":[{"entries":[{"key":"client","value":%q}]}]}`, client)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.http+"/v1/check", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var out struct {
		Allowed bool `json:"allowed"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return false, fmt.Errorf("status %d: %v", resp.StatusCode, err)
	}
	return out.Allowed, nil
}

// gatewayCall sends one request through the gateway with an API key.
func (r *soakRun) gatewayCall(ctx context.Context, key string) (bool, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.gw+"/x", nil)
	req.Header.Set("X-Api-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case 200:
		return true, nil
	case 429:
		return false, nil
	}
	return false, fmt.Errorf("gateway status %d", resp.StatusCode)
}

func (r *soakRun) callError(what string, err error) {
	// A call cut by the end of the load is the harness's own doing. gRPC
	// times a call out at the load's deadline on its own timer, which can
	// fire a moment before the context reports the deadline: check both.
	if dl, ok := r.ctx.Deadline(); r.ctx.Err() != nil || ok && !time.Now().Before(dl) {
		return
	}
	r.mu.Lock()
	r.errs = append(r.errs, callError{time.Now(), what, err.Error()})
	r.mu.Unlock()
}

// tick calls f every interval until ctx ends.
func tick(ctx context.Context, every time.Duration, f func()) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			f()
		}
	}
}

// honestClient sends honestPerSec requests a second, under the limit, by
// one front end each (RLS, JSON API, gateway in turn); it returns how many
// were rejected, which must be none.
func (r *soakRun) honestClient(ctx context.Context, i int) int64 {
	var rejected int64
	name := fmt.Sprintf("honest-%d", i)
	tick(ctx, time.Second/honestPerSec, func() {
		var ok bool
		var err error
		switch i % 3 {
		case 0:
			ok, err = r.rlsCheck(ctx, [][2]string{{"client", name}})
		case 1:
			ok, err = r.jsonCheck(ctx, name)
		default:
			ok, err = r.gatewayCall(ctx, name)
		}
		r.honestCalls.Add(1)
		switch {
		case err != nil:
			r.callError(name, err)
		case !ok:
			rejected++
		}
	})
	return rejected
}

// greedyClient sends greedyPerSec requests a second over RLS and returns the
// times its allowed answers arrived.
func (r *soakRun) greedyClient(ctx context.Context, i int) []time.Time {
	var allowed []time.Time
	name := fmt.Sprintf("greedy-%d", i)
	tick(ctx, time.Second/greedyPerSec, func() {
		ok, err := r.rlsCheck(ctx, [][2]string{{"client", name}})
		if err != nil {
			r.callError(name, err)
			return
		}
		if ok {
			allowed = append(allowed, time.Now())
		}
	})
	return allowed
}

// ledgerClient counts hits on a fixed set of keys whose limit is never
// reached, so every OK answer is a count Redis must end up holding once.
func (r *soakRun) ledgerClient(ctx context.Context) {
	tick(ctx, 5*time.Millisecond, func() {
		key := fmt.Sprintf("p%d-k%d", r.phase.Load(), rand.IntN(ledgerKeys))
		ok, err := r.rlsCheck(ctx, [][2]string{{"ledger", key}})
		if err != nil {
			r.callError("ledger", err)
			r.ledgerMu.Lock()
			r.ledgerLost[key]++
			r.ledgerMu.Unlock()
			return
		}
		if ok {
			r.ledgerMu.Lock()
			r.ledgerOK[key]++
			r.ledgerMu.Unlock()
		}
	})
}

// flood sends calls of 64 never-seen tenant keys as fast as one caller can.
//
// FLOODGATE_SOAK_FLOOD_RATE caps it in keys a second: the test suite's run
// keeps it at 2,000 a second, a flood the node's syncs keep up with, so the
// ledger must be exact; scripts/soak sets 0 (no cap), where the flood
// outruns the syncs and the node summarises one-hit flood keys instead of
// pushing them (docs/distributed.md), and reports what that costs.
func (r *soakRun) flood(ctx context.Context) {
	rate := 2000
	if v, err := strconv.Atoi(os.Getenv("FLOODGATE_SOAK_FLOOD_RATE")); err == nil && v >= 0 {
		rate = v
	}
	var n int64
	start := time.Now()
	for ctx.Err() == nil {
		if rate > 0 {
			due := start.Add(time.Duration(n) * time.Second / time.Duration(rate))
			if !sleepCtx(ctx, time.Until(due)) {
				return
			}
		}
		descs := make([][][2]string, 64)
		for i := range descs {
			n++
			descs[i] = [][2]string{{"tenant", "flood-" + strconv.FormatInt(n, 36)}}
		}
		if _, err := r.rlsCheck(ctx, descs...); err != nil {
			r.callError("flood", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		r.flooded.Add(64)
	}
}

// reloadLoop rewrites the rule file every 10 seconds.
func (r *soakRun) reloadLoop(ctx context.Context) {
	v := 0
	tick(ctx, 10*time.Second, func() {
		v++
		os.WriteFile(filepath.Join(r.dir, "rules.yaml"), []byte(soakRules(v)), 0o644)
	})
}

// sampleLoop reads the server's heap, RSS, goroutines and tracked keys.
func (r *soakRun) sampleLoop(ctx context.Context) {
	every := 10 * time.Second
	if d := soakDurationQuiet(); d < 5*time.Minute {
		every = time.Second
	}
	tick(ctx, every, func() {
		m, err := scrape(r.http + "/metrics")
		if err != nil {
			return
		}
		r.mu.Lock()
		r.samples = append(r.samples, sample{time.Since(r.start), m["go_memstats_heap_inuse_bytes"],
			m["process_resident_memory_bytes"], m["go_memstats_next_gc_bytes"], m["go_goroutines"], m["floodgate_keys_tracked"]})
		r.mu.Unlock()
	})
}

func soakDurationQuiet() time.Duration {
	d, err := time.ParseDuration(os.Getenv("FLOODGATE_SOAK"))
	if err != nil {
		return 45 * time.Second
	}
	return d
}

// scrape reads unlabelled gauges from a Prometheus text page.
func scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = f
		}
	}
	return out, sc.Err()
}

// chaos pauses Redis for a while and kills and restarts it, once each per
// sixth of the run, until ctx ends. Before each kill it waits for the
// node's pending counts to reach Redis and checks that phase's ledger keys.
func (r *soakRun) chaos(ctx context.Context, total time.Duration) {
	period := total / 6
	pause := min(15*time.Second, period/5)
	for ctx.Err() == nil {
		if !sleepCtx(ctx, period/2) {
			return
		}
		r.fault("SIGSTOP", pause, r.redis.Pause, r.redis.Resume)
		if !sleepCtx(ctx, period/2-pause) {
			return
		}
		old := r.phase.Add(1) - 1
		r.checkLedger("before a kill", old, false)
		r.fault("SIGKILL and restart", 2*time.Second, r.redis.Kill, r.redis.Restart)
	}
}

// fault runs begin, waits for, runs end, and records the window (plus five
// seconds for the breaker and the sync to recover) as one where caller
// errors are excused.
func (r *soakRun) fault(what string, d time.Duration, begin, end func()) {
	start := time.Now()
	begin()
	time.Sleep(d)
	end()
	r.mu.Lock()
	r.faults = append(r.faults, faultWindow{what, start, time.Now().Add(5 * time.Second)})
	r.mu.Unlock()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// settle waits for the node's pending counts, and any counts it owes Redis
// again after a restart, to reach Redis.
func (r *soakRun) settle() {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		m, err := scrape(r.http + "/metrics")
		// Nothing queued, the store answering, no push again owed (a kill
		// late in the run leaves one), and a sync since.
		if err == nil && m["floodgate_sync_pending"] == 0 && m["floodgate_store_up"] == 1 &&
			m["floodgate_sync_repush_pending"] == 0 && m["floodgate_sync_lag_seconds"] < 1 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.t.Errorf("sync_pending did not reach 0 within 30s")
}

// checkLedger compares, for one phase's ledger keys, the OK answers with
// the counts Redis holds: they must become equal, exactly, once the node's
// syncs have carried them (settled: the load has stopped and nothing is
// pending). Mid-run, the flood keeps the sync busy, so it polls for up to
// 20 s; more counts in Redis than OK answers fail at once.
func (r *soakRun) checkLedger(when string, phase int64, settled bool) {
	prefix := fmt.Sprintf("p%d-", phase)
	time.Sleep(time.Second) // calls that took the old phase's keys finish
	r.ledgerMu.Lock()
	var want, lost int64
	seen := map[string]bool{}
	for key, n := range r.ledgerOK {
		if strings.HasPrefix(key, prefix) {
			want += n
			seen[key] = true
		}
	}
	for key, n := range r.ledgerLost {
		if strings.HasPrefix(key, prefix) {
			lost += n
			seen[key] = true
		}
	}
	r.ledgerMu.Unlock()
	// A call that got no answer (cut at the load's end, or in a fault
	// window) may have been counted or not: Redis must hold every OK, and
	// at most those more.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got int64
		for key := range seen {
			got += r.redisCount("soak|ledger|ledger=" + key)
		}
		if got >= want || settled || time.Now().After(deadline) {
			r.t.Logf("ledger %s (phase %d): %d allowed, %d unanswered, %d counted in Redis", when, phase, want, lost, got)
			if got < want || got > want+lost {
				r.t.Errorf("ledger %s: Redis holds %d counts for %d allowed requests (and %d unanswered)", when, got, want, lost)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// report checks the promise and prints the run's figures.
func (r *soakRun) report(total time.Duration, honest []int64, greedy [][]time.Time) {
	t := r.t
	r.checkLedger("at the end", r.phase.Load(), true)
	for i, n := range honest {
		if n > 0 {
			t.Errorf("honest client %d was rejected %d times", i, n)
		}
	}
	bound := int(float64(soakLimit)*(1+soakEpsilon)) + 1 // +1: client-side times, see busiestClient
	for i, ts := range greedy {
		b := busiestClient(ts, soakWindow)
		t.Logf("greedy client %d: %d allowed, busiest %v: %d (bound %d)", i, len(ts), soakWindow, b, bound)
		if b > bound {
			t.Errorf("greedy client %d got %d in one %v window, over (1+e)L+1 = %d", i, b, soakWindow, bound)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var excused, unexcused int
	for _, e := range r.errs {
		in := slices.ContainsFunc(r.faults, func(f faultWindow) bool { return !e.at.Before(f.start) && !e.at.After(f.end) })
		if in {
			excused++
			continue
		}
		unexcused++
		if unexcused <= 5 {
			t.Errorf("caller error outside a fault window at %v: %s: %s", e.at.Sub(r.start).Round(time.Millisecond), e.what, e.err)
		}
	}
	t.Logf("soak %v: %d honest calls, %d flood keys, %d reloads, %d faults, caller errors %d in fault windows and %d outside",
		total, r.honestCalls.Load(), r.flooded.Load(), r.reloads.Load(), len(r.faults), excused, unexcused)
	r.checkFlat(total)
}

// checkFlat requires heap and goroutines to stay flat over the last two
// thirds of the run, judged on their trend: a least-squares line through
// the samples may rise over that span by at most a quarter of where it
// starts, plus 64 MiB of heap goal or 50 goroutines. The heap is judged by
// the collector's heap goal, which moves with the heap live after each
// garbage collection (five times it at GOGC=400), not by the heap in use,
// which rises and falls by a hundred MiB with every collection: compared
// sample by sample, a trough and a crest of the same heap look like growth.
func (r *soakRun) checkFlat(total time.Duration) {
	t := r.t
	var buf bytes.Buffer
	for _, s := range r.samples {
		fmt.Fprintf(&buf, "  %8v heap %6.1f MiB  goal %6.1f MiB  rss %6.1f MiB  goroutines %4.0f  keys %.0f\n",
			s.at.Round(time.Second), s.heap/(1<<20), s.heapGoal/(1<<20), s.rss/(1<<20), s.goroutines, s.keys)
	}
	t.Logf("server samples:\n%s", buf.String())
	var late []sample
	for _, s := range r.samples {
		if s.at >= total/3 {
			late = append(late, s)
		}
	}
	if len(late) < 5 {
		t.Errorf("too few samples over the last two thirds to judge heap and goroutines (%d)", len(late))
		return
	}
	goal := func(s sample) float64 { return s.heapGoal }
	gor := func(s sample) float64 { return s.goroutines }
	if from, to := trend(late, goal); to > from*1.25+64<<20 {
		t.Errorf("heap goal grew over the last two thirds: trend %.1f MiB -> %.1f MiB", from/(1<<20), to/(1<<20))
	} else {
		t.Logf("heap goal over the last two thirds: trend %.1f MiB -> %.1f MiB", from/(1<<20), to/(1<<20))
	}
	if from, to := trend(late, gor); to > from*1.25+50 {
		t.Errorf("goroutines grew over the last two thirds: trend %.0f -> %.0f", from, to)
	}
}

// trend fits a least-squares line to f over the samples and returns its
// values at the first and the last sample's time.
func trend(ss []sample, f func(sample) float64) (from, to float64) {
	var n, sx, sy, sxx, sxy float64
	for _, s := range ss {
		x, y := s.at.Seconds(), f(s)
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	slope := 0.0
	if d := n*sxx - sx*sx; d != 0 {
		slope = (n*sxy - sx*sy) / d
	}
	mean := sy / n
	x0, x1 := ss[0].at.Seconds(), ss[len(ss)-1].at.Seconds()
	return mean + slope*(x0-sx/n), mean + slope*(x1-sx/n)
}

// busiestClient is the most allowed answers that arrived within any
// window-long interval. The server decided each request before its answer
// arrived and after the previous one's arrived (one call at a time), so the
// answers in an interval were decided within it, except perhaps the first:
// the server's own busiest window is at least this minus one.
func busiestClient(ts []time.Time, window time.Duration) int {
	best, lo := 0, 0
	for hi := range ts {
		for ts[hi].Sub(ts[lo]) >= window {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// redisCount reads a ledger key's count from Redis through the Redis store
// (a sync that brings no events changes nothing and returns the state).
func (r *soakRun) redisCount(key string) int64 {
	if r.rs == nil {
		rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{r.redis.Addr()}})
		if err != nil {
			r.t.Fatal(err)
		}
		r.rs = rs
		r.t.Cleanup(func() { rs.Close() })
	}
	// The ledger rule's limit, counted under the rule's name as the engine
	// counts every rule (a reload that changes the limit keeps the count).
	alg, err := algorithm.New(algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100000000, Window: 8760 * time.Hour, Counter: "ledger"})
	if err != nil {
		r.t.Fatal(err)
	}
	b := []store.SyncBatch{{Algorithm: alg, Key: key}}
	var err2 error
	for range 5 { // the first calls after a Redis restart may find a dead connection
		if err2 = r.rs.Sync(context.Background(), time.Now().UnixNano(), b); err2 == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err2 != nil {
		r.t.Errorf("reading %s from Redis: %v", key, err2)
		return 0
	}
	d := alg.Peek(b[0].State, time.Now().UnixNano(), 1)
	return d.Limit - d.Remaining - 1
}

// TestTrend checks the soak's heap judgement: a garbage collector's
// sawtooth around a flat level is flat, a steady rise is not.
func TestTrend(t *testing.T) {
	sawtooth := func(i int) float64 { return 100 + float64(i%7)*20 }
	rising := func(i int) float64 { return 100 + float64(i)*3 }
	for _, c := range []struct {
		name     string
		f        func(int) float64
		min, max float64 // bounds on the rise from the first to the last sample
	}{
		{"sawtooth", sawtooth, -15, 15},
		{"rising", rising, 80, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ss []sample
			for i := range 31 {
				ss = append(ss, sample{at: time.Duration(i) * time.Second, heapGoal: c.f(i)})
			}
			from, to := trend(ss, func(s sample) float64 { return s.heapGoal })
			if rise := to - from; rise < c.min || rise > c.max {
				t.Errorf("trend %.1f -> %.1f: rise %.1f, want within [%v, %v]", from, to, rise, c.min, c.max)
			}
		})
	}
}
