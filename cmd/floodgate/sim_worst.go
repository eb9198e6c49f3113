package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/sim"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/trace"
)

// runSimWorst searches for the traffic that breaks an algorithm's promises.
func runSimWorst(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("floodgate sim worst", flag.ContinueOnError)
	var lf limitFlags
	lf.register(fs, true)
	seed := fs.Uint64("seed", 1, "seed of the random mutations")
	budget := fs.Int("budget", 300, "limiter runs each search spends on mutations")
	horizon := fs.Duration("horizon", 0, "span the patterns are drawn in (0: three windows)")
	maxReq := fs.Int("max-requests", 0, "most requests in one pattern (0: four times the limit)")
	asJSON := fs.Bool("json", false, "print the findings as JSON")
	traceOut := fs.String("trace-out", "", "write the two worst patterns as a CSV trace to `FILE` (keys \"worst\" and \"compliant\")")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: floodgate sim worst --algorithm NAME [flags]")
		fmt.Fprintln(stderr, "\nSearches for (a) the traffic with the busiest window of accepted requests and")
		fmt.Fprintln(stderr, "(b) compliant traffic (never over the limit in any window) that gets rejected,")
		fmt.Fprintln(stderr, "running every candidate through a fresh real limiter under a virtual clock.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if err := lf.requireAlgorithm(); err != nil {
		return fmt.Errorf("sim worst: %w", err)
	}
	if *budget < 1 || *budget > 100_000 || *maxReq < 0 || *horizon < 0 {
		return errors.New("sim worst: --budget must be 1 to 100000, --max-requests and --horizon not negative")
	}
	cfg, err := lf.config("")
	if err != nil {
		return fmt.Errorf("sim worst: %w", err)
	}
	if cfg.Window < time.Millisecond {
		return fmt.Errorf("sim worst: --window must be at least 1ms")
	}
	if *horizon > 0 && (*horizon < cfg.Window || *horizon%time.Millisecond != 0) {
		return fmt.Errorf("sim worst: --horizon must be whole milliseconds and at least the window %v", cfg.Window)
	}
	start := time.Now()
	res, err := sim.Worst(context.Background(), sim.WorstConfig{
		Limit: cfg, Seed: *seed, Budget: *budget, MaxRequests: *maxReq, Horizon: *horizon,
	})
	if err != nil {
		return err // sim's errors name the package already
	}
	elapsed := time.Since(start)
	if *traceOut != "" {
		if err := writeWorstTrace(*traceOut, describe(cfg), res); err != nil {
			return fmt.Errorf("sim worst: %w", err)
		}
	}
	if *asJSON {
		return writeWorstJSON(stdout, cfg, *seed, res)
	}
	printWorst(stdout, cfg, res, worstRun{seed: *seed, budget: *budget, elapsed: elapsed, traceOut: *traceOut})
	return nil
}

// worstFinding is one finding in sim worst's JSON report.
type worstFinding struct {
	Requests     int     `json:"requests"`
	Accepted     int     `json:"accepted"`
	Rejected     int     `json:"rejected"`
	Busiest      int64   `json:"busiest"`
	Ratio        float64 `json:"ratio"`
	FalseRejects int     `json:"false_rejects"`
	MaxSent      int64   `json:"max_sent_in_window"`
	Origin       string  `json:"origin"`
}

// writeWorstJSON writes the findings of a search with seed as JSON.
func writeWorstJSON(w io.Writer, cfg floodgate.Limit, seed uint64, res sim.WorstResult) error {
	L := cfg.Limit
	mk := func(f sim.Finding) worstFinding {
		return worstFinding{len(f.Requests), f.Accepted, f.Rejected, f.Busiest,
			math.Round(float64(f.Busiest)/float64(L)*1000) / 1000, f.FalseRejects,
			sim.Busiest(sim.Sent(f.Requests), cfg.Window), f.Origin}
	}
	return writeJSON(w, struct {
		Algorithm string       `json:"algorithm"`
		Limit     int64        `json:"limit"`
		WindowMS  int64        `json:"window_ms"`
		Seed      uint64       `json:"seed"`
		Runs      int          `json:"runs"`
		Overshoot worstFinding `json:"overshoot"`
		Compliant worstFinding `json:"compliant"`
	}{string(cfg.Algorithm), L, cfg.Window.Milliseconds(), seed, res.Runs, mk(res.Overshoot), mk(res.Compliant)})
}

// worstRun is how a search ran, for its text report.
type worstRun struct {
	seed     uint64
	budget   int
	elapsed  time.Duration
	traceOut string
}

// printWorst writes the findings as text.
func printWorst(w io.Writer, cfg floodgate.Limit, res sim.WorstResult, run worstRun) {
	L := cfg.Limit
	over, comp := res.Overshoot, res.Compliant
	maxSent := sim.Busiest(sim.Sent(comp.Requests), cfg.Window)
	fmt.Fprintf(w, "sim worst: %s\n", describe(cfg))
	fmt.Fprintf(w, "searched %d limiter runs in %v (seed %d, budget %d per search)\n\n", res.Runs, run.elapsed.Round(time.Millisecond), run.seed, run.budget)
	fmt.Fprintf(w, "(a) busiest window: %d accepted inside one %v interval = x%.3f the limit %d\n", over.Busiest, cfg.Window, float64(over.Busiest)/float64(L), L)
	fmt.Fprintf(w, "    pattern: %d requests, %d accepted, %d rejected; from %s\n", len(over.Requests), over.Accepted, over.Rejected, over.Origin)
	fmt.Fprintf(w, "(b) false rejects: %d of %d requests of a compliant pattern were rejected\n", comp.Rejected, len(comp.Requests))
	fmt.Fprintf(w, "    the pattern never sends more than %d in any %v (checked: at most %d); from %s\n", L, cfg.Window, maxSent, comp.Origin)
	switch cfg.Algorithm {
	case algorithm.Concurrency:
		fmt.Fprintln(w, "note: concurrency caps requests in flight, not a rate; each request is released right after its decision, so (a) only reflects the pattern size cap.")
	case algorithm.LeakyBucket:
		fmt.Fprintln(w, "note: leaky-bucket requests count at their arrival time plus their delay.")
	}
	if run.traceOut != "" {
		fmt.Fprintf(w, "trace written to %s (replay with: floodgate verify --algorithm %s --trace %s)\n", run.traceOut, cfg.Algorithm, run.traceOut)
	}
}

// writeWorstTrace writes both findings as one trace, the busiest pattern on
// key "worst" and the compliant one on key "compliant".
func writeWorstTrace(path, what string, res sim.WorstResult) error {
	var recs []trace.Record
	add := func(reqs []sim.Request) {
		for _, r := range reqs {
			recs = append(recs, trace.Record{TimeMS: r.At.Milliseconds(), Key: r.Key, Cost: max(r.Cost, 1)})
		}
	}
	add(res.Overshoot.Requests)
	add(res.Compliant.Requests)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].TimeMS < recs[j].TimeMS })
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--trace-out: %w", err)
	}
	comments := []string{
		"floodgate sim worst: " + what,
		fmt.Sprintf("key worst: busiest window %d (%s)", res.Overshoot.Busiest, res.Overshoot.Origin),
		fmt.Sprintf("key compliant: %d rejected of %d compliant requests (%s)", res.Compliant.Rejected, len(res.Compliant.Requests), res.Compliant.Origin),
		"time_ms,key[,cost]",
	}
	err = trace.Write(f, comments, recs)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
