// Package loadgen drives load against a Floodgate front end: the Envoy Rate
// Limit Service over gRPC (ShouldRateLimit), gubernator's API over gRPC
// (V1/GetRateLimits, on Floodgate or gubernator itself) or the JSON API over
// HTTP (POST /v1/check).
//
// It runs in one of two modes. Closed loop (Config.Rate zero): Concurrency
// clients each send a call, wait for the answer and send the next, so the
// offered load adapts to the server's speed; latency is measured per call.
// Open loop (Config.Rate above zero): calls are scheduled at a fixed rate
// whatever the server does, Concurrency bounds how many are in flight, and
// each call's latency is measured from the time it was scheduled to be sent,
// not from when a client got round to sending it. A server that stalls
// therefore shows the stall in every call queued behind it, instead of hiding
// it by slowing the generator down (the "coordinated omission" mistake).
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Entry is one key/value pair of a rate-limit descriptor.
type Entry struct {
	Key   string
	Value string
}

// Descriptor is an ordered list of entries, as in Envoy's RLS API.
type Descriptor []Entry

// ParseDescriptor parses "k1=v1,k2=v2" into a descriptor. Keys must not be
// empty; values may be.
func ParseDescriptor(s string) (Descriptor, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty descriptor: want key=value[,key=value...]")
	}
	var d Descriptor
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("descriptor entry %q: want key=value", part)
		}
		d = append(d, Entry{Key: k, Value: strings.TrimSpace(v)})
	}
	return d, nil
}

// Defaults used when a Config field is zero.
const (
	DefaultConcurrency = 32
	DefaultDuration    = 10 * time.Second
	DefaultKeys        = 1000
	DefaultDomain      = "default"
	DefaultTimeout     = 2 * time.Second
	DefaultKeyEntry    = "key"
)

// Config describes one load run.
type Config struct {
	// Target is grpc://HOST:PORT for the RLS API, gubernator://HOST:PORT
	// for gubernator's V1/GetRateLimits (one request per call, 1000 hits a
	// second per key), or http://HOST:PORT (or
	// https://) for the JSON API; an HTTP target without a path gets
	// /v1/check.
	Target string
	// Concurrency is the number of clients (closed loop) or the largest
	// number of calls in flight (open loop). Default 32.
	Concurrency int
	// Rate, when above zero, switches to open loop: calls per second,
	// scheduled evenly.
	Rate float64
	// Duration is how long calls are started for. Default 10s.
	Duration time.Duration
	// Keys is the number of distinct key values the calls spread over,
	// uniformly at random. Default 1000.
	Keys int
	// Domain is the RLS domain. Default "default", the domain of the
	// server's built-in rules.
	Domain string
	// Descriptors are sent with every call. Each call picks a key number
	// below Keys, which replaces every "{}" in the entries' values; with no
	// "{}" anywhere it is appended to the value of the entry named "key" in
	// the first descriptor (or, if it has none, of its first entry). Default
	// one descriptor with the single entry client=client-, which the
	// server's built-in per-client rule (600 a minute) counts by.
	Descriptors []Descriptor
	// Hits is the request's hits_addend; zero means 1.
	Hits uint32
	// Timeout bounds each call. Default 2s.
	Timeout time.Duration
	// Conns is the number of gRPC connections the clients share (round
	// robin). Default 2. Ignored for HTTP, which keeps one connection per
	// client.
	Conns int
	// Progress, if not nil, receives a progress line every ProgressEvery
	// (default 1s). With ProgressCR the line is rewritten in place with a
	// carriage return (for terminals); otherwise each is a new line.
	Progress      io.Writer
	ProgressEvery time.Duration
	ProgressCR    bool
	// Seed makes the key sequence reproducible; zero picks one at random.
	Seed uint64
	// KeyHeader, with an http(s) target, switches to plain requests: GET
	// Target (path as given) with this header set to "key-N" for the call's
	// key number N, as clients of a gateway send. 2xx is allowed, 429 over
	// limit.
	KeyHeader string
}

func (c *Config) fill() error {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Keys == 0 {
		c.Keys = DefaultKeys
	}
	if c.Domain == "" {
		c.Domain = DefaultDomain
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Conns == 0 {
		c.Conns = 2
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = time.Second
	}
	if len(c.Descriptors) == 0 {
		c.Descriptors = []Descriptor{{{Key: "client", Value: "client-"}}}
	}
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("concurrency must be at least 1, got %d", c.Concurrency)
	case c.Duration < 0:
		return fmt.Errorf("duration must be positive, got %v", c.Duration)
	case c.Keys < 1:
		return fmt.Errorf("keys must be at least 1, got %d", c.Keys)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate must be a positive number of calls per second, got %v", c.Rate)
	case c.Timeout < 0:
		return fmt.Errorf("timeout must be positive, got %v", c.Timeout)
	case c.Conns < 1:
		return fmt.Errorf("conns must be at least 1, got %d", c.Conns)
	}
	for i, d := range c.Descriptors {
		if len(d) == 0 {
			return fmt.Errorf("descriptor %d has no entries", i+1)
		}
		for _, e := range d {
			if e.Key == "" {
				return fmt.Errorf("descriptor %d has an entry with an empty key", i+1)
			}
		}
	}
	return nil
}

// KeyPlaceholder in a descriptor value is replaced by the call's key number.
const KeyPlaceholder = "{}"

// descriptorsFor returns the descriptors of call key number k. Every
// KeyPlaceholder in any entry's value becomes k; without one, k is appended
// to the value of the first descriptor's "key" entry, or of its first entry
// (only when there is more than one key).
func (c *Config) descriptorsFor(k int) []Descriptor {
	ks := strconv.Itoa(k)
	out := make([]Descriptor, len(c.Descriptors))
	placed := false
	for i, d := range c.Descriptors {
		out[i] = append(Descriptor(nil), d...)
		for j := range out[i] {
			if strings.Contains(out[i][j].Value, KeyPlaceholder) {
				out[i][j].Value = strings.ReplaceAll(out[i][j].Value, KeyPlaceholder, ks)
				placed = true
			}
		}
	}
	if placed || c.Keys <= 1 {
		return out
	}
	first := out[0]
	j := 0
	for i, e := range first {
		if e.Key == DefaultKeyEntry {
			j = i
			break
		}
	}
	first[j].Value += ks
	return out
}

// Outcome is how a call ended.
type Outcome uint8

// Outcomes of a call.
const (
	Allowed Outcome = iota
	OverLimit
	Failed
	// Unmatched is an allowed call no rule applied to: it was not limited
	// (a domain the rules do not have, or descriptors no rule matches).
	Unmatched
)

// caller makes calls to one kind of front end. call must be safe for
// concurrent use; worker is the client's number, key the key number.
type caller interface {
	call(ctx context.Context, worker, key int) (Outcome, error)
	close() error
}

func newCaller(c *Config) (caller, error) {
	if !strings.Contains(c.Target, "://") {
		return nil, fmt.Errorf("target %q has no scheme: want grpc://HOST:PORT or http://HOST:PORT", c.Target)
	}
	u, err := url.Parse(c.Target)
	if err != nil {
		return nil, fmt.Errorf("target %q: %v", c.Target, err)
	}
	switch u.Scheme {
	case "grpc":
		if u.Host == "" {
			return nil, fmt.Errorf("target %q: want grpc://HOST:PORT", c.Target)
		}
		return newGRPCCaller(c, u.Host)
	case "gubernator":
		if u.Host == "" {
			return nil, fmt.Errorf("target %q: want gubernator://HOST:PORT", c.Target)
		}
		return newGubernatorCaller(c, u.Host)
	case "http", "https":
		if u.Host == "" {
			return nil, fmt.Errorf("target %q: want http://HOST:PORT", c.Target)
		}
		if c.KeyHeader != "" {
			return newPlainCaller(c, u.String()), nil
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/check"
		}
		return newHTTPCaller(c, u.String())
	default:
		return nil, fmt.Errorf("target %q: unsupported scheme %q (want grpc, gubernator or http)", c.Target, u.Scheme)
	}
}

// Summary is the result of a run.
type Summary struct {
	Target      string  `json:"target"`
	Mode        string  `json:"mode"` // "closed-loop" or "open-loop"
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate,omitempty"` // requested calls/s (open loop)
	Keys        int     `json:"keys"`
	// Seconds is the wall time from the first call's start to the last
	// call's end.
	Seconds float64 `json:"seconds"`
	// Calls is the number of calls that completed (allowed, over limit or
	// failed).
	Calls     uint64 `json:"calls"`
	Allowed   uint64 `json:"allowed"`
	OverLimit uint64 `json:"over_limit"`
	Errors    uint64 `json:"errors"`
	// Unmatched counts the allowed calls no rule applied to, so they were
	// not limited (included in Allowed). The server says so in the
	// floodgate-unmatched gRPC response header and in /v1/check's
	// "unmatched" field; an /json target does not say, and counts none.
	Unmatched uint64 `json:"unmatched"`
	// Missed counts open-loop calls that were scheduled but never sent
	// because the run ended with them still queued.
	Missed uint64 `json:"missed,omitempty"`
	// Throughput is Calls per second of Seconds.
	Throughput float64 `json:"throughput"`
	// Latency holds quantiles in milliseconds (open loop: from the
	// scheduled send time).
	Latency Latency `json:"latency_ms"`
	// ClientCPU is the CPU time, in seconds, the generator's own process
	// used during the run (0 where it cannot be read). When the server
	// shares the machine, this is CPU the server did not get.
	ClientCPU float64 `json:"client_cpu_s"`
	// ErrorSamples names up to five distinct errors with their counts.
	ErrorSamples []ErrorSample `json:"error_samples,omitempty"`
}

// Latency holds latency figures in milliseconds.
type Latency struct {
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99.9"`
	Max  float64 `json:"max"`
}

// ErrorSample is one distinct error message and how often it occurred.
type ErrorSample struct {
	Error string `json:"error"`
	Count uint64 `json:"count"`
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// WriteText writes the summary for a person to read.
func (s *Summary) WriteText(w io.Writer) {
	mode := fmt.Sprintf("closed loop, %d clients", s.Concurrency)
	if s.Mode == "open-loop" {
		mode = fmt.Sprintf("open loop at %.0f calls/s, up to %d in flight", s.Rate, s.Concurrency)
	}
	pct := func(n uint64) float64 {
		if s.Calls == 0 {
			return 0
		}
		return 100 * float64(n) / float64(s.Calls)
	}
	fmt.Fprintf(w, "target      %s (%s, %d keys)\n", s.Target, mode, s.Keys)
	fmt.Fprintf(w, "duration    %.2fs\n", s.Seconds)
	fmt.Fprintf(w, "calls       %d (%.0f calls/s)\n", s.Calls, s.Throughput)
	fmt.Fprintf(w, "allowed     %d (%.1f%%)\n", s.Allowed, pct(s.Allowed))
	fmt.Fprintf(w, "over-limit  %d (%.1f%%)\n", s.OverLimit, pct(s.OverLimit))
	fmt.Fprintf(w, "errors      %d\n", s.Errors)
	fmt.Fprintf(w, "unmatched   %d (%.1f%%) allowed because no rule applied (not limited)\n", s.Unmatched, pct(s.Unmatched))
	if s.Calls > 0 && s.Unmatched == s.Calls {
		fmt.Fprintf(w, "warning     no rule applied to any call: check -domain and -descriptor against the rules (GET /v1/rules)\n")
	}
	if s.ClientCPU > 0 && s.Seconds > 0 {
		per := ""
		if s.Calls > 0 {
			per = fmt.Sprintf(", %.1f µs per call", s.ClientCPU/float64(s.Calls)*1e6)
		}
		fmt.Fprintf(w, "client cpu  %.2fs (%.2f cores%s)\n", s.ClientCPU, s.ClientCPU/s.Seconds, per)
	}
	if s.Missed > 0 {
		fmt.Fprintf(w, "missed      %d scheduled calls never sent (server too slow for the rate)\n", s.Missed)
	}
	l := s.Latency
	fmt.Fprintf(w, "latency ms  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  (min %.3f, mean %.3f)\n",
		l.P50, l.P90, l.P99, l.P999, l.Max, l.Min, l.Mean)
	for _, e := range s.ErrorSamples {
		fmt.Fprintf(w, "error       %dx %s\n", e.Count, e.Error)
	}
}

// counters are the live totals the progress line reads.
type counters struct {
	allowed, over, failed, unmatched atomic.Uint64
}

func (c *counters) total() uint64 { return c.allowed.Load() + c.over.Load() + c.failed.Load() }

// errorLog keeps the first few distinct error messages.
type errorLog struct {
	mu    sync.Mutex
	order []string
	count map[string]uint64
}

func (e *errorLog) add(err error) {
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.count == nil {
		e.count = map[string]uint64{}
	}
	if _, ok := e.count[msg]; !ok {
		if len(e.order) >= 5 {
			return
		}
		e.order = append(e.order, msg)
	}
	e.count[msg]++
}

// Run sends load as cfg describes until cfg.Duration has passed or ctx is
// done, and returns the summary. An error means the run could not start
// (bad configuration, bad target); failed calls are counted, not returned.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	cl, err := newCaller(&cfg)
	if err != nil {
		return nil, err
	}
	defer cl.close()

	r := newRun(ctx, &cfg, cl)
	defer r.cancel()
	cpuBefore := processCPU()
	done := make(chan struct{})
	go func() { r.startWorkers(); close(done) }()
	progressed := r.wait(ctx, done)
	elapsed := time.Since(r.start)
	cpu := processCPU() - cpuBefore
	if progressed && cfg.ProgressCR {
		fmt.Fprintln(cfg.Progress)
	}
	return r.summary(elapsed, cpu), nil
}

// run is the state of one Run: its schedule, the workers' tallies and the
// context their calls run under.
type run struct {
	cfg   *Config
	cl    caller
	live  counters
	errs  errorLog
	hists []Histogram
	stop  atomic.Bool
	seq   atomic.Int64 // open loop: next scheduled call
	seed  uint64

	// Calls in flight when the run ends may finish; only a call still
	// running a Timeout after the end is cut off (by cancel).
	ctx    context.Context
	cancel context.CancelFunc

	start, end time.Time
	interval   time.Duration // open loop: time between scheduled calls; 0 for closed loop
	scheduled  int64         // open loop: calls in the schedule
	// An open-loop run drains calls queued before the end for at most this
	// long after it; the rest are counted as missed.
	drainUntil time.Time
}

// newRun lays out the schedule of a run starting now.
func newRun(ctx context.Context, cfg *Config, cl caller) *run {
	r := &run{cfg: cfg, cl: cl, hists: make([]Histogram, cfg.Concurrency), seed: cfg.Seed}
	if r.seed == 0 {
		r.seed = rand.Uint64()
	}
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	r.start = time.Now()
	r.end = r.start.Add(cfg.Duration)
	if cfg.Rate > 0 {
		r.interval = time.Duration(float64(time.Second) / cfg.Rate)
		if r.interval <= 0 {
			r.interval = 1
		}
		r.scheduled = int64(cfg.Duration / r.interval)
	}
	r.drainUntil = r.end.Add(cfg.Timeout)
	return r
}

// startWorkers runs cfg.Concurrency workers and returns when all are done.
func (r *run) startWorkers() {
	var wg sync.WaitGroup
	for w := range r.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.work(w)
		}()
	}
	wg.Wait()
}

// work is worker w's loop: back to back calls (closed loop) or the next
// scheduled call at its intended time (open loop), until the run ends.
func (r *run) work(w int) {
	rng := rand.New(rand.NewPCG(r.seed, uint64(w)))
	for !r.stop.Load() {
		key := rng.IntN(r.cfg.Keys)
		if r.interval == 0 {
			if !time.Now().Before(r.end) {
				return
			}
			began := time.Now()
			o, err := r.call(w, key)
			r.record(w, began, o, err)
			continue
		}
		i := r.seq.Add(1) - 1
		if i >= r.scheduled {
			return
		}
		intended := r.start.Add(time.Duration(i) * r.interval)
		if d := time.Until(intended); d > 0 {
			time.Sleep(d)
		} else if time.Now().After(r.drainUntil) {
			return
		}
		o, err := r.call(w, key)
		// Open loop: latency counts from the intended time, so a slow
		// server's queueing is measured, not hidden.
		r.record(w, intended, o, err)
	}
}

// call makes one call for worker w under the per-call timeout.
func (r *run) call(w, key int) (Outcome, error) {
	cctx, ccancel := context.WithTimeout(r.ctx, r.cfg.Timeout)
	o, err := r.cl.call(cctx, w, key)
	ccancel()
	if err != nil {
		o = Failed
	}
	return o, err
}

// record counts one call's outcome and latency since began.
func (r *run) record(w int, began time.Time, o Outcome, err error) {
	r.hists[w].Record(time.Since(began))
	switch o {
	case Allowed:
		r.live.allowed.Add(1)
	case Unmatched:
		r.live.allowed.Add(1)
		r.live.unmatched.Add(1)
	case OverLimit:
		r.live.over.Add(1)
	default:
		r.live.failed.Add(1)
		if err != nil {
			r.errs.add(err)
		}
	}
}

// wait returns when the workers are done (done closes), printing progress
// meanwhile, and says whether it printed any. ctx being done stops the
// workers after their current call; calls still running long after the end
// are cut off.
func (r *run) wait(ctx context.Context, done <-chan struct{}) (progressed bool) {
	cfg := r.cfg
	var tick <-chan time.Time
	if cfg.Progress != nil {
		t := time.NewTicker(cfg.ProgressEvery)
		defer t.Stop()
		tick = t.C
	}
	var lastN uint64
	lastT := r.start
	hardStop := time.NewTimer(cfg.Duration + 2*cfg.Timeout + time.Second)
	defer hardStop.Stop()
	stopCh := ctx.Done()
	for {
		select {
		case <-done:
			return progressed
		case <-stopCh:
			r.stop.Store(true)
			stopCh = nil
		case <-hardStop.C:
			// Calls still running long after the end: cut them off.
			r.stop.Store(true)
			r.cancel()
		case now := <-tick:
			n := r.live.total()
			r.progress(now, n, float64(n-lastN)/now.Sub(lastT).Seconds())
			lastN, lastT = n, now
			progressed = true
		}
	}
}

// progress writes one progress line: n calls so far, at rate a second.
func (r *run) progress(now time.Time, n uint64, rate float64) {
	cfg, live := r.cfg, &r.live
	line := fmt.Sprintf("%5.1fs  %9d calls  %8.0f/s  allowed %d  over-limit %d  errors %d",
		now.Sub(r.start).Seconds(), n, rate, live.allowed.Load(), live.over.Load(), live.failed.Load())
	if cfg.ProgressCR {
		fmt.Fprintf(cfg.Progress, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(cfg.Progress, line)
	}
}

// summary totals a finished run that took elapsed and cpu.
func (r *run) summary(elapsed, cpu time.Duration) *Summary {
	cfg, live := r.cfg, &r.live
	var h Histogram
	for i := range r.hists {
		h.Merge(&r.hists[i])
	}
	s := &Summary{
		Target:      cfg.Target,
		Mode:        "closed-loop",
		Concurrency: cfg.Concurrency,
		Keys:        cfg.Keys,
		Seconds:     elapsed.Seconds(),
		Allowed:     live.allowed.Load(),
		OverLimit:   live.over.Load(),
		Errors:      live.failed.Load(),
		Unmatched:   live.unmatched.Load(),
		ClientCPU:   cpu.Seconds(),
	}
	s.Calls = s.Allowed + s.OverLimit + s.Errors
	if r.interval > 0 {
		s.Mode = "open-loop"
		s.Rate = cfg.Rate
		// Calls drawn but never sent (the run ended, or they were still
		// queued at the drain deadline) are missed.
		if int64(s.Calls) < r.scheduled {
			s.Missed = uint64(r.scheduled - int64(s.Calls))
		}
	}
	if elapsed > 0 {
		s.Throughput = float64(s.Calls) / elapsed.Seconds()
	}
	s.Latency = Latency{
		Min: ms(h.Min()), Mean: ms(h.Mean()), P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)),
		P99: ms(h.Quantile(0.99)), P999: ms(h.Quantile(0.999)), Max: ms(h.Max()),
	}
	r.errs.mu.Lock()
	for _, m := range r.errs.order {
		s.ErrorSamples = append(s.ErrorSamples, ErrorSample{Error: m, Count: r.errs.count[m]})
	}
	r.errs.mu.Unlock()
	return s
}
