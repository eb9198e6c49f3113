package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/store"
)

// BenchmarkArrangementsRedis offers the baseline's edge load to 8 nodes sharing
// a real redis-server: 200,000 keys, 40,000 decisions per second (open
// loop, spread over the nodes), plus one hot client at 90/s on its own key.
// Each arrangement runs for a fixed time (FLOODGATE_BENCH_SECONDS, default
// 8) whatever b.N is; run it with -benchtime 1x. FLOODGATE_BENCH_RATE
// changes the offered rate, FLOODGATE_BENCH_ALGORITHM the rule's algorithm
// (default bounded-log, 600 per 60 s) and FLOODGATE_BENCH_DEADLINE the
// nodes' store deadline (default 100ms, well above the default Deadline, so the
// figures measure Redis rather than the breaker). It reports the decisions
// per second achieved, Redis commands per decision (from INFO
// commandstats), decision latency p50 and p99, and the hot client's
// accepted count over the limit (the run is shorter than the window, so
// that is its busiest-window ratio).
//
//	go test -run XXX -bench ArrangementsRedis -benchtime 1x ./redisstore
func BenchmarkArrangementsRedis(b *testing.B) {
	secs := 8
	if s, err := strconv.Atoi(os.Getenv("FLOODGATE_BENCH_SECONDS")); err == nil && s > 0 {
		secs = s
	}
	rate := 40000
	if s, err := strconv.Atoi(os.Getenv("FLOODGATE_BENCH_RATE")); err == nil && s > 0 {
		rate = s
	}
	srv := redistest.Start(b)
	for _, arr := range distributed.Arrangements() {
		b.Run(string(arr), func(b *testing.B) {
			srv.FlushAll()
			rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr()}})
			if err != nil {
				b.Fatal(err)
			}
			defer rs.Close()
			r := loadRun(b, srv, rs, arr, rate, time.Duration(secs)*time.Second)
			b.ReportMetric(r.achieved, "decisions/s")
			b.ReportMetric(r.cmdsPerDecision, "redis-cmds/decision")
			b.ReportMetric(r.callsPerDecision, "redis-script-calls/decision")
			b.ReportMetric(float64(r.scriptUsec)/float64(max(1, r.decisions)), "redis-script-µs/decision")
			b.ReportMetric(float64(r.p50.Microseconds()), "p50-µs")
			b.ReportMetric(float64(r.p99.Microseconds()), "p99-µs")
			b.ReportMetric(r.hotRatio, "hot-accepted/limit")
			b.Logf("%s: offered %d/s for %v, achieved %.0f/s (%d dropped by the generator), %d decisions, "+
				"%d Redis commands (%.5f per decision; %s), %d script calls sent (%.5f per decision) using %.1f µs of Redis CPU per decision, latency p50 %v p99 %v max %v, hot client accepted %d of %d sent, limit 600 (x%.3f), "+
				"store errors %d, breaker openings %d, last error %q",
				arr, rate, time.Duration(secs)*time.Second, r.achieved, r.dropped, r.decisions, r.cmds, r.cmdsPerDecision, r.cmdDetail, r.calls, r.callsPerDecision, float64(r.scriptUsec)/float64(max(1, r.decisions)),
				r.p50, r.p99, r.max, r.hotAccepted, r.hotSent, r.hotRatio, r.storeErrors, r.openings, r.lastErr)
			b.ReportAllocs()
		})
	}
}

type loadResult struct {
	decisions       int64
	dropped         int64
	achieved        float64
	cmds            int64
	cmdsPerDecision float64
	// calls are the commands clients sent (script calls); cmds also count
	// the GET, SET and TIME the scripts run inside Redis.
	calls            int64
	callsPerDecision float64
	cmdDetail        string
	p50, p99, max    time.Duration
	hotAccepted      int64
	hotSent          int64
	hotRatio         float64
	storeErrors      uint64
	openings         uint64
	lastErr          string
	scriptUsec       int64 // Redis CPU time spent in scripts
}

// commandStats returns the calls per command from INFO commandstats, and
// under the name "usec" the server CPU time all commands took.
func commandStats(b *testing.B, srv *redistest.Server) map[string]int64 {
	out, err := srv.Do("INFO", "commandstats")
	if err != nil {
		b.Fatalf("INFO commandstats: %v", err)
	}
	m := map[string]int64{}
	for _, line := range strings.Split(out, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				m[strings.TrimPrefix(name, "cmdstat_")] = n
			}
			if v, ok := strings.CutPrefix(f, "usec="); ok && (name == "cmdstat_evalsha" || name == "cmdstat_eval") {
				n, _ := strconv.ParseInt(v, 10, 64)
				m["usec"] += n
			}
		}
	}
	return m
}

type job struct {
	node int
	key  string
	hot  bool
}

func loadRun(b *testing.B, srv *redistest.Server, rs *redisstore.Store, arr distributed.Arrangement, rate int, dur time.Duration) loadResult {
	const nodesN, keys, workers = 8, 200_000, 64
	name := algorithm.Name(os.Getenv("FLOODGATE_BENCH_ALGORITHM"))
	if name == "" {
		name = algorithm.BoundedLog
	}
	rule, err := algorithm.New(algorithm.Config{Algorithm: name, Limit: 600, Window: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	deadline := 100 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("FLOODGATE_BENCH_DEADLINE")); err == nil && d > 0 {
		deadline = d
	}
	nodes := make([]*distributed.Node, nodesN)
	for i := range nodes {
		nodes[i], err = distributed.New(distributed.Options{Arrangement: arr, Nodes: nodesN, Shared: rs, StoreName: "redis",
			Deadline: deadline, ID: fmt.Sprintf("bench-%s-%d", arr, i)})
		if err != nil {
			b.Fatal(err)
		}
	}
	keyNames := make([]string, keys)
	for i := range keyNames {
		keyNames[i] = fmt.Sprintf("client-%06d", i)
	}
	jobs := make(chan job, 4096)
	var (
		decisions, dropped, hotAcc atomic.Int64
		mu                         sync.Mutex
		lat                        []time.Duration
		wg                         sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, rate*int(dur/time.Second)/workers+1024)
			for j := range jobs {
				start := time.Now()
				d, err := nodes[j.node].DecideOne(context.Background(), start.UnixNano(), store.Request{Algorithm: rule, Key: j.key, Cost: 1})
				mine = append(mine, time.Since(start))
				if err != nil {
					b.Errorf("DecideOne: %v", err)
					return
				}
				decisions.Add(1)
				if j.hot && d.Allowed {
					hotAcc.Add(1)
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	before := commandStats(b, srv)
	rng := rand.New(rand.NewPCG(20260730, uint64(len(arr))))
	start := time.Now()
	const tick = time.Millisecond
	perTick := float64(rate) * tick.Seconds()
	var owed, hotOwed float64
	var hotSent int64
	for now := start; now.Sub(start) < dur; now = now.Add(tick) {
		if d := time.Until(now); d > 0 {
			time.Sleep(d)
		}
		owed += perTick
		hotOwed += 90 * tick.Seconds()
		for ; owed >= 1; owed-- {
			select {
			case jobs <- job{node: rng.IntN(nodesN), key: keyNames[rng.IntN(keys)]}:
			default:
				dropped.Add(1)
			}
		}
		for ; hotOwed >= 1; hotOwed-- {
			select {
			case jobs <- job{node: rng.IntN(nodesN), key: "hot-client", hot: true}:
				hotSent++
			default:
				dropped.Add(1)
			}
		}
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	var r loadResult
	for _, n := range nodes {
		h := n.Health()
		r.storeErrors += h.StoreErrors
		r.openings += h.BreakerOpenings
		if h.LastError != "" {
			r.lastErr = h.LastError
		}
		n.Close(context.Background())
	}
	after := commandStats(b, srv)
	var details []string
	for name, n := range after {
		d := n - before[name]
		if name == "usec" {
			r.scriptUsec = d
			continue
		}
		if name == "info" {
			d-- // the INFO that read "after"
		}
		if d > 0 {
			switch name {
			case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
				r.calls += d
			}
			r.cmds += d
			details = append(details, fmt.Sprintf("%s %d", name, d))
		}
	}
	slices.Sort(details)
	r.cmdDetail = strings.Join(details, ", ")
	if r.cmdDetail == "" {
		r.cmdDetail = "none"
	}
	r.decisions = decisions.Load()
	r.dropped = dropped.Load()
	r.achieved = float64(r.decisions) / elapsed.Seconds()
	r.cmdsPerDecision = float64(r.cmds) / float64(max(1, r.decisions))
	r.callsPerDecision = float64(r.calls) / float64(max(1, r.decisions))
	slices.Sort(lat)
	if len(lat) > 0 {
		r.p50, r.p99, r.max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	}
	r.hotAccepted, r.hotSent = hotAcc.Load(), hotSent
	r.hotRatio = float64(r.hotAccepted) / 600
	return r
}
