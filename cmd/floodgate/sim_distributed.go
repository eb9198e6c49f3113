package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/sim"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/server"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/store"
)

// distParams are the experiment's parameters, from the flags.
type distParams struct {
	limit     floodgate.Limit
	nodes     int
	rates     []int
	intervals []time.Duration
	seed      uint32
	storeURL  string
}

// distRow is one (rate, arrangement) run, or one interval of the sweep.
type distRow struct {
	Rate         int     `json:"rate"`
	Arrangement  string  `json:"arrangement"`
	IntervalMS   int64   `json:"interval_ms,omitempty"`
	Requests     int     `json:"requests"`
	Accepted     int     `json:"accepted"`
	Rejected     int     `json:"rejected"`
	Busiest      int64   `json:"busiest"`
	Overshoot    int64   `json:"overshoot"`
	Ratio        float64 `json:"ratio"`
	FalseRejects int     `json:"false_rejects"`
	Touches      int64   `json:"touches"`
	TouchesPerS  float64 `json:"touches_per_s"`
	Passes       bool    `json:"passes"`
	// RefreshPulls are the extra pulls that make each delayed round atomic
	// in the simulator; they are not counted as touches.
	RefreshPulls int64 `json:"refresh_pulls,omitempty"`
}

type distDoc struct {
	Limit        int64     `json:"limit"`
	WindowMS     int64     `json:"window_ms"`
	Nodes        int       `json:"nodes"`
	Seed         uint32    `json:"seed"`
	Algorithm    string    `json:"algorithm"`
	Store        string    `json:"store"`
	Arrangements []distRow `json:"arrangements"`
	Intervals    []distRow `json:"intervals"`
	Notes        []string  `json:"notes"`
}

// runSimDistributed drives N real limiter nodes (package distributed) under
// a virtual clock through the baseline's distributed-counter experiment.
func runSimDistributed(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("floodgate sim distributed", flag.ContinueOnError)
	var lf limitFlags
	lf.register(fs, false)
	fs.StringVar(&lf.algorithm, "algorithm", string(algorithm.FixedWindow),
		"algorithm; fixed-window (one counter whose single window spans the run) is the baseline's global counter")
	nodes := fs.Int("nodes", 8, "limiter nodes: N")
	rates := fs.String("rates", "10,90", "client rates in requests per second, comma-separated")
	intervals := fs.String("intervals", "200ms,1s,2s,5s",
		"delayed-sync intervals for the sweep, comma-separated; the first is used in the arrangement tables")
	seed := fs.Uint64("seed", 20260730, "seed of the generator that assigns requests to nodes")
	storeURL := fs.String("store", "", "shared store: empty for an in-process memory store, else a Redis address: host:port, redis://[user:pass@]host:port[/db], rediss://..., redis-cluster://host:port,... or redis-sentinel://host:port,...?master=NAME (the simulator's clock is passed to Redis)")
	asJSON := fs.Bool("json", false, "print the tables as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: floodgate sim distributed [flags]")
		fmt.Fprintln(stderr, "\nRuns the distributed-counter experiment of a published rate-limiter design (the\nbaseline, whose tables it reproduces) with real limiter nodes under a")
		fmt.Fprintln(stderr, "virtual clock: one client sending --rates requests per second for one window,")
		fmt.Fprintln(stderr, "each request sent to a node picked by a seeded generator, through the centralized,")
		fmt.Fprintln(stderr, "split and delayed arrangements, then a sweep of delayed-sync intervals.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	p := distParams{nodes: *nodes, storeURL: *storeURL}
	var err error
	if p.limit, err = lf.config(""); err != nil {
		return fmt.Errorf("sim distributed: %w", err)
	}
	if *nodes < 1 || *nodes > 1024 {
		return fmt.Errorf("sim distributed: --nodes must be between 1 and 1024, got %d", *nodes)
	}
	if *seed > math.MaxUint32 {
		return fmt.Errorf("sim distributed: --seed must fit in 32 bits, got %d", *seed)
	}
	p.seed = uint32(*seed)
	if p.rates, err = parseRates(*rates); err != nil {
		return fmt.Errorf("sim distributed: --rates: %w", err)
	}
	if p.intervals, err = parseIntervals(*intervals); err != nil {
		return fmt.Errorf("sim distributed: --intervals: %w", err)
	}
	for _, r := range p.rates {
		if n := int64(r) * int64(p.limit.Window) / int64(time.Second); n > maxSimRequests {
			return fmt.Errorf("sim distributed: rate %d/s over a %v window is %d requests per run; at most %d",
				r, p.limit.Window, n, maxSimRequests)
		}
	}
	doc, err := simDistributed(context.Background(), p)
	if err != nil {
		return fmt.Errorf("sim distributed: %w", err)
	}
	if *asJSON {
		return writeJSON(stdout, doc)
	}
	printDistributed(stdout, doc)
	return nil
}

// maxSimRequests bounds one run (rate x window) so a mistyped flag cannot
// start an hour-long simulation.
const maxSimRequests = 5_000_000

func parseRates(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		r, err := strconv.Atoi(f)
		if err != nil || r < 1 || r > 1_000_000 {
			return nil, fmt.Errorf("want whole requests per second between 1 and 1000000, got %q", f)
		}
		out = append(out, r)
	}
	return out, nil
}

func parseIntervals(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		d, err := time.ParseDuration(f)
		if err != nil || d < time.Millisecond {
			return nil, fmt.Errorf("want durations of at least 1ms such as 200ms or 2s, got %q", f)
		}
		out = append(out, d)
	}
	return out, nil
}

// sharedStore is the store the simulated nodes share, with call counters.
type sharedStore struct {
	store.Store
	syncer   store.Syncer
	name     string
	decides  atomic.Int64 // decision calls
	syncs    atomic.Int64 // Sync calls while counting
	counting atomic.Bool  // whether Sync calls count as touches
}

func (s *sharedStore) Decide(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) error {
	s.decides.Add(1)
	return s.Store.Decide(ctx, now, reqs, out)
}

func (s *sharedStore) DecideOne(ctx context.Context, now int64, req store.Request) (algorithm.Decision, error) {
	s.decides.Add(1)
	return s.Store.DecideOne(ctx, now, req)
}

func (s *sharedStore) Sync(ctx context.Context, now int64, batches []store.SyncBatch) error {
	if s.counting.Load() {
		s.syncs.Add(1)
	}
	return s.syncer.Sync(ctx, now, batches)
}

// nodeSyncer is what the simulated nodes sync through: s, with SyncOnce
// when the store has it (Redis), so that a push sent again after a timeout
// is applied once there too.
func (s *sharedStore) nodeSyncer() store.Syncer {
	if _, ok := s.syncer.(store.OnceSyncer); ok {
		return onceShared{s}
	}
	return s
}

// onceShared is a sharedStore over a store.OnceSyncer.
type onceShared struct{ *sharedStore }

func (o onceShared) SyncOnce(ctx context.Context, now int64, id store.SyncID, batches []store.SyncBatch) error {
	if o.counting.Load() {
		o.syncs.Add(1)
	}
	return o.syncer.(store.OnceSyncer).SyncOnce(ctx, now, id, batches)
}

// simDistributed runs every (rate, arrangement) and the interval sweep.
func simDistributed(ctx context.Context, p distParams) (distDoc, error) {
	doc := distDoc{
		Limit: p.limit.Limit, WindowMS: p.limit.Window.Milliseconds(), Nodes: p.nodes,
		Seed: p.seed, Algorithm: string(p.limit.Algorithm), Store: "memory",
	}
	open := func() (*sharedStore, func(), error) {
		m := memstore.New(memstore.Options{})
		return &sharedStore{Store: m, syncer: m, name: "memory"}, func() {}, nil
	}
	if p.storeURL != "" {
		rs, name, err := openSimStore(ctx, p.storeURL)
		if err != nil {
			return doc, err
		}
		defer rs.Close()
		doc.Store = name
		open = func() (*sharedStore, func(), error) {
			return &sharedStore{Store: rs, syncer: rs, name: name}, func() {}, nil
		}
	}
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	runs := 0
	run := func(arr distributed.Arrangement, rate int, interval time.Duration) (distRow, error) {
		sh, done, err := open()
		if err != nil {
			return distRow{}, err
		}
		defer done()
		runs++ // a fresh key per run, so runs sharing a Redis do not meet
		key := fmt.Sprintf("sim-distributed/%s/%d/%s/%d/%d/client", runID, runs, arr, rate, interval.Milliseconds())
		return simRun(ctx, p, sh, arr, rate, interval, key)
	}
	for _, rate := range p.rates {
		for _, arr := range distributed.Arrangements() {
			r, err := run(arr, rate, p.intervals[0])
			if err != nil {
				return doc, err
			}
			doc.Arrangements = append(doc.Arrangements, r)
		}
	}
	top := p.rates[0]
	for _, r := range p.rates {
		top = max(top, r)
	}
	for _, iv := range p.intervals {
		r, err := run(distributed.Delayed, top, iv)
		if err != nil {
			return doc, err
		}
		doc.Intervals = append(doc.Intervals, r)
	}
	doc.Notes = distNotes(p, doc)
	return doc, nil
}

// lcg is the baseline's 32-bit linear congruential generator.
type lcg uint32

// node advances the generator and returns floor(u·n) for u = s/2^32.
func (g *lcg) node(n int) int {
	*g = *g*1103515245 + 12345
	return int((uint64(*g) * uint64(n)) >> 32)
}

// simRun runs one client at rate for one window through p.nodes nodes of
// the arrangement, sharing sh.
func simRun(ctx context.Context, p distParams, sh *sharedStore, arr distributed.Arrangement, rate int, interval time.Duration, key string) (distRow, error) {
	alg, err := algorithm.New(p.limit)
	if err != nil {
		return distRow{}, err
	}
	epoch := sim.Epoch(p.limit.Window)
	var now time.Time
	nodes, err := simNodes(p, sh, arr, interval, key, func() time.Time { return now })
	if err != nil {
		return distRow{}, err
	}
	n := int(int64(rate) * int64(p.limit.Window) / int64(time.Second))
	row := distRow{Rate: rate, Arrangement: string(arr), Requests: n}
	if arr == distributed.Delayed {
		row.IntervalMS = interval.Milliseconds()
	}
	g := lcg(p.seed)
	lastSync := make([]time.Duration, p.nodes)
	var accepted []sim.Event
	req := store.Request{Algorithm: alg, Key: key, Cost: 1}
	for i := 0; i < n; i++ {
		t := time.Duration(int64(i) * int64(time.Second) / int64(rate))
		now = epoch.Add(t)
		j := g.node(p.nodes)
		if arr == distributed.Delayed {
			pulls, err := syncDue(ctx, nodes, sh, lastSync, t, interval)
			if err != nil {
				return row, fmt.Errorf("%s %w", arr, err)
			}
			row.RefreshPulls += pulls
		}
		d, err := nodes[j].DecideOne(ctx, now.UnixNano(), req)
		if err != nil {
			return row, fmt.Errorf("%s node %d at %v: %w", arr, j, t, err)
		}
		if d.Allowed {
			row.Accepted++
			accepted = append(accepted, sim.Event{At: t, Cost: 1})
		} else {
			row.Rejected++
		}
	}
	now = epoch.Add(p.limit.Window)
	if err := closeSimNodes(ctx, nodes, sh, arr); err != nil {
		return row, err
	}
	switch arr {
	case distributed.Centralized:
		row.Touches = sh.decides.Load()
	case distributed.Delayed:
		row.Touches = sh.syncs.Load()
	}
	row.score(p, accepted)
	return row, nil
}

// simNodes makes p.nodes nodes of the arrangement on sh, synchronized by
// hand (Sync) and reading time from clock.
func simNodes(p distParams, sh *sharedStore, arr distributed.Arrangement, interval time.Duration, key string, clock func() time.Time) ([]*distributed.Node, error) {
	nodes := make([]*distributed.Node, p.nodes)
	for i := range nodes {
		var err error
		nodes[i], err = distributed.New(distributed.Options{
			Arrangement:  arr,
			Nodes:        p.nodes,
			Interval:     interval,
			Deadline:     5 * time.Second, // the simulator measures counts, not latency
			SyncDeadline: 10 * time.Second,
			Shared:       sh,
			Syncer:       sh.nodeSyncer(),
			StoreName:    sh.name,
			ID:           fmt.Sprintf("%s-node%d", key, i),
			Clock:        clock,
			ManualSync:   true,
			Refresh:      p.limit.Window, // every node refreshes its whole view each round, as in the baseline
		})
		if err != nil {
			return nil, err
		}
	}
	return nodes, nil
}

// syncDue synchronizes, at t, the delayed nodes whose interval has passed
// since their last sync, and returns the extra pulls made.
func syncDue(ctx context.Context, nodes []*distributed.Node, sh *sharedStore, lastSync []time.Duration, t, interval time.Duration) (pulls int64, err error) {
	var due []int
	for k := range nodes {
		if t-lastSync[k] >= interval {
			due = append(due, k)
			lastSync[k] = t
		}
	}
	// Every due node pushes and pulls (one touch each); then all but
	// the last pull again, so each sees the whole round's counts,
	// as the baseline's model (one global snapshot per round) does.
	sh.counting.Store(true)
	for _, k := range due {
		if err := nodes[k].Sync(ctx); err != nil {
			return pulls, fmt.Errorf("node %d sync at %v: %w", k, t, err)
		}
	}
	sh.counting.Store(false)
	for x := 0; x+1 < len(due); x++ {
		if err := nodes[due[x]].Sync(ctx); err != nil {
			return pulls, fmt.Errorf("node %d sync at %v: %w", due[x], t, err)
		}
		pulls++
	}
	return pulls, nil
}

// closeSimNodes closes the nodes (their final push counts as touches) and
// fails if any saw a store error.
func closeSimNodes(ctx context.Context, nodes []*distributed.Node, sh *sharedStore, arr distributed.Arrangement) error {
	sh.counting.Store(true)
	defer sh.counting.Store(false)
	for k, nd := range nodes {
		if err := nd.Close(ctx); err != nil {
			return fmt.Errorf("%s node %d final push: %w", arr, k, err)
		}
		if h := nd.Health(); h.StoreErrors > 0 {
			return fmt.Errorf("%s node %d saw %d store errors, last: %s", arr, k, h.StoreErrors, h.LastError)
		}
	}
	return nil
}

// score sets the row's figures from the accepted requests: the busiest
// window, the overshoot, false rejects and whether it passes.
func (row *distRow) score(p distParams, accepted []sim.Event) {
	limit := p.limit.Limit
	row.Busiest = sim.Busiest(accepted, p.limit.Window)
	row.Overshoot = max(0, row.Busiest-limit)
	row.Ratio = math.Round(float64(row.Busiest)/float64(limit)*1000) / 1000
	if int64(row.Requests) <= limit {
		row.FalseRejects = row.Rejected
	}
	row.TouchesPerS = math.Round(float64(row.Touches)/p.limit.Window.Seconds()*10) / 10
	row.Passes = float64(row.Busiest) <= 1.1*float64(limit)
}

// baselineFigures are the baseline's published tables (its defaults): accepted
// per (rate, arrangement), and accepted per sync interval at 90/s.
var baselineFigures = struct {
	accepted  map[string]int
	touches   map[string]int64
	intervals map[time.Duration]int
}{
	accepted: map[string]int{
		"10/centralized": 600, "10/split": 575, "10/delayed": 600,
		"90/centralized": 600, "90/split": 600, "90/delayed": 609,
	},
	touches: map[string]int64{
		"10/centralized": 600, "10/split": 0, "10/delayed": 2400,
		"90/centralized": 5400, "90/split": 0, "90/delayed": 2400,
	},
	intervals: map[time.Duration]int{
		200 * time.Millisecond: 609, time.Second: 630, 2 * time.Second: 720, 5 * time.Second: 900,
	},
}

// baselineDefaults reports whether p is the baseline's experiment.
func baselineDefaults(p distParams) bool {
	return p.limit.Algorithm == algorithm.FixedWindow && p.limit.Limit == 600 &&
		p.limit.Window == time.Minute && p.nodes == 8 && p.seed == 20260730
}

// distNotes explains how the figures are made and which differ from the baseline
// 000's, and why.
func distNotes(p distParams, doc distDoc) []string {
	notes := []string{
		fmt.Sprintf("Each arrangement runs %d real limiter nodes (package distributed) sharing one %s store under a virtual clock; "+
			"request i is sent at floor(i*1e9/rate) ns to node floor(u*%d), u from the baseline's 32-bit LCG.", p.nodes, doc.Store, p.nodes),
		"Centralized touches are the shared store's decision calls, one per request. Split nodes enforce " +
			fmt.Sprintf("floor(%d/%d) = %d each and never touch the store.", p.limit.Limit, p.nodes, max(1, p.limit.Limit/int64(p.nodes))),
		"Delayed touches are counted Sync calls: each node's push-and-pull when its interval has passed, plus its final push on Close. " +
			"To make each round one global snapshot as in the baseline's model, every node but the last pulls once more after all have pushed; " +
			"those refresh pulls (refresh_pulls in --json) are a simulator device and not counted.",
	}
	if p.limit.Algorithm == algorithm.FixedWindow {
		notes = append(notes, fmt.Sprintf("fixed-window with a %v window aligned to virtual time zero: the run lasts one window, "+
			"so the nodes share one global counter, which is the baseline's model.", p.limit.Window))
	}
	if !baselineDefaults(p) {
		return append(notes, "The parameters differ from the baseline's (fixed-window, 600 per 60s, 8 nodes, seed 20260730), so its tables do not apply.")
	}
	var diffs []string
	for _, r := range doc.Arrangements {
		k := fmt.Sprintf("%d/%s", r.Rate, r.Arrangement)
		if want, ok := baselineFigures.accepted[k]; ok && want != r.Accepted && p.intervals[0] == 200*time.Millisecond {
			diffs = append(diffs, fmt.Sprintf("%s at %d/s accepted %d, rejected %d, overshoot %d (baseline %d, %d, %d)",
				r.Arrangement, r.Rate, r.Accepted, r.Rejected, r.Overshoot, want, r.Requests-want, max(0, int64(want)-p.limit.Limit)))
		}
		if want, ok := baselineFigures.touches[k]; ok && want != r.Touches && p.intervals[0] == 200*time.Millisecond {
			diffs = append(diffs, fmt.Sprintf("%s at %d/s touched the store %d times (baseline %d)", r.Arrangement, r.Rate, r.Touches, want))
		}
	}
	if len(p.rates) > 0 && doc.Intervals != nil && doc.Intervals[0].Rate == 90 {
		for _, r := range doc.Intervals {
			iv := time.Duration(r.IntervalMS) * time.Millisecond
			if want, ok := baselineFigures.intervals[iv]; ok && want != r.Accepted {
				diffs = append(diffs, fmt.Sprintf("delayed at %v accepted %d, overshoot %d, ratio x%.3f (baseline %d, %d, x%.3f)",
					iv, r.Accepted, r.Overshoot, r.Ratio, want, max(0, int64(want)-p.limit.Limit), float64(want)/float64(p.limit.Limit)))
			}
		}
	}
	if len(diffs) == 0 {
		return append(notes, "Every figure equals the baseline's tables.")
	}
	return append(notes,
		"Figures that differ from the baseline: "+strings.Join(diffs, "; ")+".",
		"Why: the baseline keeps time in floating-point seconds (t = i/rate) and syncs when t - lastSync >= 0.2. At 90/s, 0.6 - 0.4 "+
			"evaluates to 0.19999999999999996, so from its third sync on each sync lands one request (11.1 ms) late and its nodes "+
			"resync every 19 requests instead of every 18. The simulator keeps exact nanoseconds, syncing at 200 ms, 400 ms, 600 ms, ...; "+
			"the blind stretches around the moment the count reaches the limit fall differently, which moves the delayed 200 ms figure "+
			"from 609 to 612. At 10/s the same drift happens but nothing is rejected either way; at 1 s, 2 s and 5 s every sync time "+
			"is a whole second, exact in floating point, so the schedules and the figures agree.",
	)
}

func printDistributed(w io.Writer, doc distDoc) {
	name := map[distributed.Arrangement]string{
		distributed.Centralized: "centralized",
		distributed.Split:       "split quota",
		distributed.Delayed:     "delayed synchronization",
	}
	fmt.Fprintf(w, "sim distributed: %s, limit %d per %v, %d nodes, seed %d, store %s\n",
		doc.Algorithm, doc.Limit, time.Duration(doc.WindowMS)*time.Millisecond, doc.Nodes, doc.Seed, doc.Store)
	byRate := map[int][]distRow{}
	var order []int
	for _, r := range doc.Arrangements {
		if _, ok := byRate[r.Rate]; !ok {
			order = append(order, r.Rate)
		}
		byRate[r.Rate] = append(byRate[r.Rate], r)
	}
	for _, rate := range order {
		rows := byRate[rate]
		fmt.Fprintf(w, "\nclient rate %d/s -> %d requests, limit %d, %d nodes", rate, rows[0].Requests, doc.Limit, doc.Nodes)
		for _, r := range rows {
			if r.IntervalMS > 0 {
				fmt.Fprintf(w, ", delayed sync every %v", time.Duration(r.IntervalMS)*time.Millisecond)
			}
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%-26s%11s%11s%12s%16s%18s\n", "arrangement", "accepted", "rejected", "overshoot", "false rejects", "counter touches")
		for _, r := range rows {
			fmt.Fprintf(w, "%-26s%11d%11d%12d%16d%18d\n", name[distributed.Arrangement(r.Arrangement)], r.Accepted, r.Rejected, r.Overshoot, r.FalseRejects, r.Touches)
		}
	}
	if len(doc.Intervals) > 0 {
		fmt.Fprintf(w, "\ndelayed synchronization, client rate %d/s (burst)\n", doc.Intervals[0].Rate)
		fmt.Fprintf(w, "%-18s%11s%12s%18s%12s%16s\n", "sync interval", "accepted", "overshoot", "overshoot ratio", "touches/s",
			fmt.Sprintf("threshold %g", 1.1*float64(doc.Limit)))
		for _, r := range doc.Intervals {
			verdict := "fails"
			if r.Passes {
				verdict = "passes"
			}
			fmt.Fprintf(w, "%-18v%11d%12d%18s%12.1f%16s\n", time.Duration(r.IntervalMS)*time.Millisecond,
				r.Accepted, r.Overshoot, fmt.Sprintf("x%.3f", r.Ratio), r.TouchesPerS, verdict)
		}
	}
	fmt.Fprintln(w, "\nnotes:")
	for _, n := range doc.Notes {
		fmt.Fprintf(w, "  - %s\n", n)
	}
}

// openSimStore connects to the shared store a --store address names, in
// the syntax of redisstore.ParseURL (host:port, redis://, rediss://,
// redis-cluster://, redis-sentinel://). The simulator passes its virtual
// time to Redis (ClientTime) and keeps its keys under the prefix fg-sim.
// name is the address without its password, for the report. A password
// the address leaves out comes from FLOODGATE_REDIS_PASSWORD.
func openSimStore(ctx context.Context, raw string) (st *redisstore.Store, name string, err error) {
	o, err := redisstore.ParseURL(raw)
	if err != nil {
		return nil, "", fmt.Errorf("--store: %w", err)
	}
	if o.Password == "" {
		o.Password = os.Getenv(server.PasswordEnv)
	}
	o.ClientTime, o.Prefix = true, "fg-sim"
	rs, err := redisstore.New(ctx, o)
	if err != nil {
		return nil, "", fmt.Errorf("--store: %w", err)
	}
	return rs, rs.Address(), nil
}
