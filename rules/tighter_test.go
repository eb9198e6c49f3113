package rules

import (
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

func TestTighter(t *testing.T) {
	st := func(allowed bool, remaining, limit int64, retry time.Duration) Status {
		return Status{Limit: limit, Decision: algorithm.Decision{Allowed: allowed, Remaining: remaining, Limit: limit, RetryAfter: retry}}
	}
	cases := []struct {
		name string
		a, b Status
		want bool
	}{
		{"rejection before acceptance", st(false, 0, 10, time.Second), st(true, 0, 10, 0), true},
		{"acceptance after rejection", st(true, 0, 10, 0), st(false, 0, 10, time.Second), false},
		{"longer wait", st(false, 0, 10, 2*time.Second), st(false, 0, 10, time.Second), true},
		{"shorter wait", st(false, 0, 10, time.Second), st(false, 0, 10, 2*time.Second), false},
		{"less left relative to the limit", st(true, 1, 10, 0), st(true, 50, 100, 0), true},
		{"more left relative to the limit", st(true, 50, 100, 0), st(true, 1, 10, 0), false},
		{"equal shares", st(true, 5, 10, 0), st(true, 50, 100, 0), false},
		// Remaining times Limit overflows int64 near maxLimit; the
		// comparison must still order the shares: 1/2 of the limit left
		// against all but one.
		{"largest limits", st(true, maxLimit/2, maxLimit, 0), st(true, maxLimit-1, maxLimit, 0), true},
		{"largest limits reversed", st(true, maxLimit-1, maxLimit, 0), st(true, maxLimit/2, maxLimit, 0), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.a.Tighter(&c.b); got != c.want {
				t.Errorf("%s: Tighter = %v, want %v", c.name, got, c.want)
			}
		})
	}
}
