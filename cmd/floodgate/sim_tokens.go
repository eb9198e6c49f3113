package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/sim"
)

// runSimTokens runs a token budget charged after the response, forgiven,
// settled and reserved.
func runSimTokens(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("floodgate sim tokens", flag.ContinueOnError)
	s := sim.DefaultTokenShape
	fs.IntVar(&s.Clients, "clients", s.Clients, "clients sharing the budget, each with one request in flight at a time")
	fs.Int64Var(&s.Budget, "budget", s.Budget, "tokens per window")
	fs.DurationVar(&s.Window, "window", s.Window, "the budget's window")
	fs.Int64Var(&s.MinCost, "min-cost", s.MinCost, "fewest tokens a response costs")
	fs.Int64Var(&s.MaxCost, "max-cost", s.MaxCost, "most tokens a response costs")
	fs.Int64Var(&s.Estimate, "estimate", s.Estimate, "tokens the reserved mode reserves per request (0: max-cost)")
	fs.DurationVar(&s.MinLatency, "min-latency", s.MinLatency, "shortest response time")
	fs.DurationVar(&s.MaxLatency, "max-latency", s.MaxLatency, "longest response time")
	fs.DurationVar(&s.Think, "think", s.Think, "longest pause between a client's requests")
	fs.DurationVar(&s.Duration, "duration", s.Duration, "virtual time simulated")
	fs.Uint64Var(&s.Seed, "seed", s.Seed, "random seed")
	asJSON := fs.Bool("json", false, "print the runs as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: floodgate sim tokens [flags]")
		fmt.Fprintln(stderr, "\nClients share a token budget whose cost is known only after each response.")
		fmt.Fprintln(stderr, "Prints the tokens served per window when late costs are forgiven (decided")
		fmt.Fprintln(stderr, "like requests), settled (checked before, charged after even past the")
		fmt.Fprintln(stderr, "budget) and reserved (an estimate counted before, the excess charged after).")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	runs, err := sim.Tokens(context.Background(), s)
	if err != nil {
		return err
	}
	lim, err := floodgate.New(floodgate.Limit{Limit: s.Budget, Window: s.Window})
	if err != nil {
		return fmt.Errorf("sim tokens: %w", err)
	}
	bound := s.Bound(lim.Limit().Tolerance)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"shape": s, "settled_bound": bound, "runs": runs})
	}
	fmt.Fprintf(stdout, "%d clients, budget %d tokens per %v, responses of %d to %d tokens taking %v to %v\n\n",
		s.Clients, s.Budget, s.Window, s.MinCost, s.MaxCost, s.MinLatency, s.MaxLatency)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "window\t")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t", r.Mode)
	}
	fmt.Fprintln(tw)
	for w := range runs[0].PerWindow {
		fmt.Fprintf(tw, "%d\t", w+1)
		for _, r := range runs {
			fmt.Fprintf(tw, "%d\t", r.PerWindow[w])
		}
		fmt.Fprintln(tw)
	}
	row := func(name string, f func(sim.TokenRun) int64) {
		fmt.Fprintf(tw, "%s\t", name)
		for _, r := range runs {
			fmt.Fprintf(tw, "%d\t", f(r))
		}
		fmt.Fprintln(tw)
	}
	row("busiest window", func(r sim.TokenRun) int64 { return r.Busiest })
	row("total", func(r sim.TokenRun) int64 { return r.Total })
	row("responses", func(r sim.TokenRun) int64 { return int64(r.Served) })
	row("rejected", func(r sim.TokenRun) int64 { return int64(r.Rejected) })
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nsettled bound: budget with tolerance + one largest response per client = %d\n", bound)
	return nil
}
