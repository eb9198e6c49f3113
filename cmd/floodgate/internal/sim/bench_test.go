package sim

import (
	"testing"

	"github.com/floodgate-dev/floodgate"
)

// BenchmarkRun measures the simulator's cost per simulated request: the
// baseline's uniform 2x pattern (3,600 requests) through a fresh limiter for each
// algorithm in turn.
func BenchmarkRun(b *testing.B) {
	ps, err := Patterns(baseShape, "client")
	if err != nil {
		b.Fatal(err)
	}
	reqs := ps[0].Requests
	limits := Configs(floodgate.Limit{Limit: 600, Window: baseShape.Window, Slices: 12}, 60)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := Run(ctx, limits[i%len(limits)], reqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reqs)), "ns/request")
}

// BenchmarkWorst measures one worst-case search (both objectives) at the
// baseline's limit with the command's default budget.
func BenchmarkWorst(b *testing.B) {
	c := floodgate.Limit{Algorithm: "sliding-window", Limit: 600, Window: baseShape.Window, Slices: 12}
	runs := 0
	for b.Loop() {
		res, err := Worst(ctx, WorstConfig{Limit: c, Seed: 1, Budget: 300})
		if err != nil {
			b.Fatal(err)
		}
		runs = res.Runs
	}
	b.ReportMetric(float64(runs), "runs/search")
}
