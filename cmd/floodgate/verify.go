package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/sim"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/trace"
)

// limitFlags are the algorithm parameters the simulator and verifier share.
type limitFlags struct {
	algorithm string
	limit     int64
	window    time.Duration
	slices    int
	bucket    int64
	rate      float64
	burst     int64
	tolerance float64
	maxDelay  time.Duration
}

// register adds the flags to fs; withAlgorithm adds --algorithm too.
func (f *limitFlags) register(fs *flag.FlagSet, withAlgorithm bool) {
	if withAlgorithm {
		fs.StringVar(&f.algorithm, "algorithm", "", "algorithm, one of: "+algorithmList())
	}
	fs.Int64Var(&f.limit, "limit", 600, "requests (cost units) allowed per window: L")
	fs.DurationVar(&f.window, "window", time.Minute, "window the limit applies to: W")
	fs.IntVar(&f.slices, "slices", 12, "slices of the sliding window")
	fs.Int64Var(&f.bucket, "bucket", 60, "token-bucket capacity in tokens (60 in the reference patterns of sim window); it refills at --rate")
	fs.Float64Var(&f.rate, "rate", 0, "token-bucket and leaky-bucket rate per second (0: limit/window)")
	fs.Int64Var(&f.burst, "burst", 1, "gcra burst: 1 spaces requests perfectly, as the tables in docs/simulator.md; 0 means the algorithm's default, the limit")
	fs.Float64Var(&f.tolerance, "tolerance", 0, "bounded-log tolerance e (0: the algorithm's default, 0.05)")
	fs.DurationVar(&f.maxDelay, "max-delay", 0, "leaky-bucket queue bound (0: the window)")
}

// algorithmList returns the algorithm names separated by commas.
func algorithmList() string {
	var b strings.Builder
	for i, n := range algorithm.Names() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(n))
	}
	return b.String()
}

// requireAlgorithm reports a missing --algorithm, listing the choices.
func (f *limitFlags) requireAlgorithm() error {
	if f.algorithm == "" {
		return errors.New("--algorithm is required (one of " + algorithmList() + ")")
	}
	return nil
}

// config returns the limit the flags describe for algorithm name (the
// --algorithm flag when name is empty), checked by building it.
func (f *limitFlags) config(name algorithm.Name) (floodgate.Limit, error) {
	if name == "" {
		name = algorithm.Name(f.algorithm)
	}
	c := floodgate.Limit{
		Algorithm: name,
		Limit:     f.limit,
		Window:    f.window,
		Slices:    f.slices,
		Rate:      f.rate,
		Burst:     f.burst,
		Tolerance: f.tolerance,
		MaxDelay:  f.maxDelay,
	}
	if name == algorithm.TokenBucket {
		c.Capacity = f.bucket
	}
	switch {
	case f.slices < 1:
		return c, fmt.Errorf("--slices must be at least 1, got %d", f.slices)
	case f.bucket < 1:
		return c, fmt.Errorf("--bucket must be at least 1, got %d", f.bucket)
	case f.rate < 0 || f.burst < 0 || f.tolerance < 0 || f.maxDelay < 0:
		return c, errors.New("--rate, --burst, --tolerance and --max-delay must not be negative")
	case f.window%time.Millisecond != 0:
		return c, fmt.Errorf("--window must be a whole number of milliseconds, got %v", f.window)
	}
	lim, err := floodgate.New(c)
	if err != nil {
		return c, err
	}
	return lim.Limit(), nil
}

// describe names an algorithm's effective parameters in one line.
func describe(c floodgate.Limit) string {
	s := fmt.Sprintf("%s, limit %d per %v", c.Algorithm, c.Limit, c.Window)
	switch c.Algorithm {
	case algorithm.SlidingWindow:
		s += fmt.Sprintf(", %d slices", c.Slices)
	case algorithm.TokenBucket:
		s += fmt.Sprintf(", capacity %d tokens refilled at %g/s", c.Capacity, c.Rate)
	case algorithm.GCRA:
		s += fmt.Sprintf(", burst %d", c.Burst)
	case algorithm.LeakyBucket:
		s += fmt.Sprintf(", leaking %g/s, queue bound %v", c.Rate, c.MaxDelay)
	case algorithm.BoundedLog:
		s += fmt.Sprintf(", tolerance %g", c.Tolerance)
	case algorithm.Concurrency:
		s = fmt.Sprintf("%s, %d in flight (each request released right after its decision)", c.Algorithm, c.Limit)
	}
	return s
}

// parseFlags parses args with fs, printing usage to stderr on -h.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// keyReport is one key's (or the total's) line in verify's report.
type keyReport struct {
	Key          string `json:"key,omitempty"`
	Requests     int    `json:"requests"`
	Accepted     int    `json:"accepted"`
	Rejected     int    `json:"rejected"`
	Busiest      int64  `json:"busiest"`
	FalseRejects int    `json:"false_rejects"`
}

// verifyDoc is verify's JSON report.
type verifyDoc struct {
	Trace     string      `json:"trace"`
	Algorithm string      `json:"algorithm"`
	Limit     int64       `json:"limit"`
	WindowMS  int64       `json:"window_ms"`
	Keys      []keyReport `json:"keys"`
	Total     keyReport   `json:"total"`
}

// runVerify replays a CSV trace through the real limiter under a virtual
// clock and reports the promise's measures per key and in total.
func runVerify(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("floodgate verify", flag.ContinueOnError)
	var lf limitFlags
	lf.register(fs, true)
	path := fs.String("trace", "", "CSV trace to replay: time_ms,key[,cost] per line, # comments")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	strict := fs.Bool("strict", false, "exit with status 1 when the replay broke the promise: a key's busiest window over the limit ((1+e)·L for bounded-log) or a false reject")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: floodgate verify --algorithm NAME --trace FILE [flags]")
		fmt.Fprintln(stderr, "\nReplays the trace through the real limiter under a virtual clock; lines are")
		fmt.Fprintln(stderr, "sorted by time (stably) first. Busiest, limits and false rejects are in cost units.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if err := lf.requireAlgorithm(); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if *path == "" {
		return errors.New("verify: --trace FILE is required")
	}
	cfg, err := lf.config("")
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	f, err := os.Open(*path)
	if err != nil {
		return fmt.Errorf("verify: --trace: trace file: %w", err)
	}
	recs, err := trace.Parse(f, *path)
	f.Close()
	if err != nil {
		return err
	}
	reqs := make([]sim.Request, len(recs))
	for i, r := range recs {
		reqs[i] = sim.Request{At: time.Duration(r.TimeMS) * time.Millisecond, Key: r.Key, Cost: r.Cost}
	}
	outs, err := sim.Run(context.Background(), cfg, reqs)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	keys, total := verifyReport(reqs, outs, cfg.Limit, cfg.Window)
	if *asJSON {
		if err := writeJSON(stdout, verifyDoc{*path, string(cfg.Algorithm), cfg.Limit, cfg.Window.Milliseconds(), keys, total}); err != nil {
			return err
		}
	} else {
		printVerify(stdout, *path, cfg, len(reqs), keys, total)
	}
	if *strict {
		if broken := promiseBroken(cfg, total); broken != "" {
			fmt.Fprintf(stderr, "verify: promise broken: %s (--strict)\n", broken)
			return exitError{1}
		}
	}
	return nil
}

// promiseBroken says how a replay's total broke the promise for cfg (at
// most the limit in any window, (1+e)·L for bounded-log, and no compliant
// request rejected), or returns "" if it did not.
func promiseBroken(cfg floodgate.Limit, total keyReport) string {
	bound := float64(cfg.Limit)
	if cfg.Algorithm == algorithm.BoundedLog {
		bound *= 1 + cfg.Tolerance
	}
	var why []string
	if float64(total.Busiest) > bound {
		why = append(why, fmt.Sprintf("busiest window %d > %g", total.Busiest, bound))
	}
	if total.FalseRejects > 0 {
		why = append(why, fmt.Sprintf("%d false rejects", total.FalseRejects))
	}
	return strings.Join(why, ", ")
}

// printVerify writes verify's text report.
func printVerify(stdout io.Writer, path string, cfg floodgate.Limit, requests int, keys []keyReport, total keyReport) {
	fmt.Fprintf(stdout, "verify %s: %d requests, %d keys; %s\n\n", path, requests, len(keys), describe(cfg))
	tw := tabwriter.NewWriter(stdout, 0, 0, 3, ' ', tabwriter.AlignRight)
	width := len("total")
	for _, k := range keys {
		width = max(width, len(k.Key))
	}
	fmt.Fprintf(tw, "%-*s\trequests\taccepted\trejected\tbusiest %v\tfalse rejects\t\n", width, "key", cfg.Window)
	for _, k := range append(keys, total) {
		fmt.Fprintf(tw, "%-*s\t%d\t%d\t%d\t%d\t%d\t\n", width, k.Key, k.Requests, k.Accepted, k.Rejected, k.Busiest, k.FalseRejects)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\nbusiest: most cost units accepted for one key inside any %v interval (total: the highest of any key).\n", cfg.Window)
	fmt.Fprintf(stdout, "false reject: a rejection while its key had sent at most %d units in the %v ending at it, this request included.\n", cfg.Limit, cfg.Window)
	if cfg.Algorithm == algorithm.LeakyBucket {
		fmt.Fprintln(stdout, "leaky-bucket: an accepted request counts at its arrival time plus its delay.")
	}
	if cfg.Algorithm == algorithm.Concurrency {
		fmt.Fprintln(stdout, "concurrency: each accepted request is released right after its decision.")
	}
}

// verifyReport measures each key of a replay on its own, and the total.
func verifyReport(reqs []sim.Request, outs []sim.Outcome, limit int64, window time.Duration) ([]keyReport, keyReport) {
	idx := map[string][]int{}
	for i, r := range reqs {
		idx[r.Key] = append(idx[r.Key], i)
	}
	names := make([]string, 0, len(idx))
	for k := range idx {
		names = append(names, k)
	}
	sort.Strings(names)
	total := keyReport{Key: "total"}
	keys := make([]keyReport, 0, len(names))
	for _, k := range names {
		kr := make([]sim.Request, len(idx[k]))
		ko := make([]sim.Outcome, len(idx[k]))
		for j, i := range idx[k] {
			kr[j], ko[j] = reqs[i], outs[i]
		}
		s := sim.Summarize(kr, ko, limit, window)
		rep := keyReport{k, s.Requests, s.Accepted, s.Rejected, s.Busiest, s.FalseRejects}
		keys = append(keys, rep)
		total.Requests += rep.Requests
		total.Accepted += rep.Accepted
		total.Rejected += rep.Rejected
		total.FalseRejects += rep.FalseRejects
		total.Busiest = max(total.Busiest, rep.Busiest)
	}
	return keys, total
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
