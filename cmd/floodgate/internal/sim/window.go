package sim

import (
	"context"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
)

// WindowResult is one algorithm's run over one pattern.
type WindowResult struct {
	Algorithm algorithm.Name
	Summary
	// Overshoot is Busiest minus the limit; negative when the busiest
	// window stayed below it.
	Overshoot int64
	// Ratio is Busiest divided by the limit.
	Ratio float64
	// Outcomes holds the limiter's decision for each of the pattern's
	// requests.
	Outcomes []Outcome
}

// WindowTable is one pattern run through every algorithm.
type WindowTable struct {
	Pattern
	Results []WindowResult
}

// Configs returns the limit for each algorithm in algorithm.Names() built from
// base: base with Algorithm set, and Capacity set to bucket for
// token-bucket only (the baseline's bucket of 60 tokens refilled at L/W per
// second). Every other parameter keeps base's value or the algorithm's
// default.
func Configs(base floodgate.Limit, bucket int64) []floodgate.Limit {
	out := make([]floodgate.Limit, 0, len(algorithm.Names()))
	for _, name := range algorithm.Names() {
		c := base
		c.Algorithm = name
		if name == algorithm.TokenBucket && bucket > 0 {
			c.Capacity = bucket
		}
		out = append(out, c)
	}
	return out
}

// Window runs the three reference patterns (see Patterns) through each of
// limits, a fresh limiter per pattern and limit, and measures each run.
// shape's Limit and Window are the ones the measures use.
func Window(ctx context.Context, shape Shape, limits []floodgate.Limit) ([]WindowTable, error) {
	patterns, err := Patterns(shape, "client")
	if err != nil {
		return nil, err
	}
	tables := make([]WindowTable, 0, len(patterns))
	for _, p := range patterns {
		t := WindowTable{Pattern: p}
		for _, lim := range limits {
			outs, err := Run(ctx, lim, p.Requests)
			if err != nil {
				return nil, err
			}
			s := Summarize(p.Requests, outs, shape.Limit, shape.Window)
			t.Results = append(t.Results, WindowResult{
				Algorithm: lim.Algorithm,
				Summary:   s,
				Overshoot: s.Busiest - shape.Limit,
				Ratio:     float64(s.Busiest) / float64(shape.Limit),
				Outcomes:  outs,
			})
		}
		tables = append(tables, t)
	}
	return tables, nil
}
