package sim

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
)

// worstLimit is small so that the searches run fast under -race.
func worstLimit(name algorithm.Name) floodgate.Limit {
	c := floodgate.Limit{Algorithm: name, Limit: 100, Window: 10 * time.Second, Slices: 10}
	if name == algorithm.TokenBucket {
		c.Capacity = 10 // the baseline's proportion: a tenth of the limit
	}
	return c
}

func worst(t *testing.T, c floodgate.Limit) WorstResult {
	t.Helper()
	res, err := Worst(ctx, WorstConfig{Limit: c, Seed: 7, Budget: 120})
	if err != nil {
		t.Fatal(err)
	}
	// Whatever was found must be what the limiter really does, and the
	// compliant pattern must really be compliant.
	for _, f := range []Finding{res.Overshoot, res.Compliant} {
		outs, err := Run(ctx, c, f.Requests)
		if err != nil {
			t.Fatal(err)
		}
		if got := Summarize(f.Requests, outs, c.Limit, c.Window); got != f.Summary {
			t.Errorf("%s: rerun of %q gives %+v, search reported %+v", c.Algorithm, f.Origin, got, f.Summary)
		}
	}
	if sent := Busiest(Sent(res.Compliant.Requests), c.Window); sent > c.Limit {
		t.Errorf("%s: compliant pattern sends %d in one window, over the limit %d", c.Algorithm, sent, c.Limit)
	}
	if res.Compliant.FalseRejects != res.Compliant.Rejected {
		t.Errorf("%s: %d rejections of a compliant pattern but %d false rejects", c.Algorithm, res.Compliant.Rejected, res.Compliant.FalseRejects)
	}
	return res
}

func TestWorstFixedWindowReachesTwiceTheLimit(t *testing.T) {
	res := worst(t, worstLimit(algorithm.FixedWindow))
	if res.Overshoot.Busiest != 200 {
		t.Errorf("busiest = %d, want 200 (2L at a window boundary)", res.Overshoot.Busiest)
	}
	if res.Compliant.Rejected != 0 {
		t.Errorf("fixed-window rejected %d compliant requests; it counts a subset of the trailing window", res.Compliant.Rejected)
	}
}

func TestWorstSlidingWindowFarAboveTheLimit(t *testing.T) {
	res := worst(t, worstLimit(algorithm.SlidingWindow))
	// Piling at the end of the oldest counted slice, then again once it
	// stops being counted (W - s + 1ms later), gets 2L into one window.
	if res.Overshoot.Busiest != 200 {
		t.Errorf("busiest = %d, want 200 (L at the end of a slice, L when it leaves the count)", res.Overshoot.Busiest)
	}
}

func TestWorstTokenBucketFalseRejects(t *testing.T) {
	res := worst(t, worstLimit(algorithm.TokenBucket))
	if res.Compliant.Rejected == 0 {
		t.Errorf("found no false rejects against a 10-token bucket for a limit of 100")
	}
}

func TestWorstBoundedLogKeepsBothPromises(t *testing.T) {
	for _, e := range []float64{0.05, 0.1, 0.2} {
		c := worstLimit(algorithm.BoundedLog)
		c.Tolerance = e
		res := worst(t, c)
		if bound := int64(float64(c.Limit) * (1 + e)); res.Overshoot.Busiest > bound {
			t.Errorf("e=%g: busiest %d > (1+e)L = %d (pattern from %s)", e, res.Overshoot.Busiest, bound, res.Overshoot.Origin)
		}
		if res.Overshoot.Busiest < c.Limit {
			t.Errorf("e=%g: busiest %d; the search should at least fill the limit %d", e, res.Overshoot.Busiest, c.Limit)
		}
		if res.Compliant.Rejected != 0 {
			t.Errorf("e=%g: %d false rejects (pattern from %s)", e, res.Compliant.Rejected, res.Compliant.Origin)
		}
	}
}

func TestWorstSlidingLogExact(t *testing.T) {
	res := worst(t, worstLimit(algorithm.SlidingLog))
	if res.Overshoot.Busiest != 100 || res.Compliant.Rejected != 0 {
		t.Errorf("sliding-log: busiest %d, false rejects %d; want exactly 100 and 0", res.Overshoot.Busiest, res.Compliant.Rejected)
	}
}

func TestWorstIsDeterministic(t *testing.T) {
	c := worstLimit(algorithm.WeightedWindow)
	a, err := Worst(ctx, WorstConfig{Limit: c, Seed: 3, Budget: 40})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Worst(ctx, WorstConfig{Limit: c, Seed: 3, Budget: 40})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two searches with seed 3 differ: %+v vs %+v", a.Overshoot.Summary, b.Overshoot.Summary)
	}
}

func TestWorstBadConfig(t *testing.T) {
	for _, c := range []WorstConfig{
		{Limit: floodgate.Limit{Algorithm: "nope", Limit: 1, Window: time.Second}},
		{Limit: floodgate.Limit{Algorithm: algorithm.FixedWindow, Limit: 0, Window: time.Second}},
		{Limit: floodgate.Limit{Algorithm: algorithm.FixedWindow, Limit: 1, Window: time.Second}, Horizon: time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			if _, err := Worst(ctx, c); err == nil {
				t.Errorf("Worst(%+v) succeeded, want an error", c)
			}
		})
	}
}

func TestWorstRefusesHugeSearches(t *testing.T) {
	c := floodgate.Limit{Algorithm: algorithm.GCRA, Limit: MaxWorstLimit + 1, Window: time.Hour}
	if _, err := Worst(ctx, WorstConfig{Limit: c}); err == nil || !strings.Contains(err.Error(), "scale the limit and window down") {
		t.Errorf("limit %d: error %v, want advice to scale down", c.Limit, err)
	}
	c.Limit = 10
	if _, err := Worst(ctx, WorstConfig{Limit: c, MaxRequests: 4*MaxWorstLimit + 1}); err == nil {
		t.Errorf("MaxRequests %d accepted", 4*MaxWorstLimit+1)
	}
}
