package ratelimitheader

import (
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

func TestFieldsSeveralLimits(t *testing.T) {
	global := Limit{Name: "global", Limit: 1000, Window: 90*time.Second + time.Millisecond,
		Decision: algorithm.Decision{Allowed: false, Remaining: 0, ResetAfter: 30 * time.Second, RetryAfter: 2100 * time.Millisecond}}
	o := Outcome{
		Limits: []Limit{
			{Name: "per-member", Limit: 20, Window: time.Minute,
				Decision: algorithm.Decision{Allowed: true, Remaining: 7, ResetAfter: 1500 * time.Millisecond}},
			global,
			{Name: "in-flight", Limit: 4, Decision: algorithm.Decision{Allowed: true, Remaining: 3}},
		},
		Tightest:   global,
		Rejected:   true,
		RetryAfter: 2100 * time.Millisecond,
	}
	got := map[string]string{}
	for _, f := range Fields(o) {
		got[f.Name] = f.Value
	}
	want := map[string]string{
		"X-RateLimit-Limit":     "1000",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "30",
		"RateLimit-Policy":      `"per-member";q=20;w=60, "global";q=1000;w=91, "in-flight";q=4;qu="concurrent-requests"`,
		// The rejecting limit's t is its retry-after, not its full reset.
		"RateLimit":   `"per-member";r=7;t=2, "global";r=0;t=3, "in-flight";r=3;t=0`,
		"Retry-After": "3",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("fields %v, want exactly %v", got, want)
	}
}

func TestSetForDecision(t *testing.T) {
	for _, c := range []struct {
		name   string
		window time.Duration
		d      algorithm.Decision
		want   map[string]string
	}{
		{"rejected", time.Minute, algorithm.Decision{Limit: 100, Remaining: 0, RetryAfter: 1500 * time.Millisecond, ResetAfter: time.Minute},
			map[string]string{"Retry-After": "2", "Ratelimit-Policy": `"tokens";q=100;w=60`, "Ratelimit": `"tokens";r=0;t=2`,
				"X-Ratelimit-Limit": "100", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "60"}},
		{"allowed", time.Second, algorithm.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 200 * time.Millisecond},
			map[string]string{"Ratelimit-Policy": `"tokens";q=5;w=1`, "Ratelimit": `"tokens";r=4;t=1`,
				"X-Ratelimit-Limit": "5", "X-Ratelimit-Remaining": "4", "X-Ratelimit-Reset": "1"}},
		{"rejected at once in flight", 0, algorithm.Decision{Limit: 2},
			map[string]string{"Retry-After": "1", "Ratelimit-Policy": `"tokens";q=2;qu="concurrent-requests"`, "Ratelimit": `"tokens";r=0;t=0`,
				"X-Ratelimit-Limit": "2", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{"X-Ratelimit-Limit": {"stale"}, "Other": {"kept"}}
			Set(h, ForDecision("tokens", c.window, c.d))
			c.want["Other"] = "kept"
			if len(h) != len(c.want) {
				t.Errorf("header %v, want exactly %v", h, c.want)
			}
			for k, v := range c.want {
				if got := h[k]; len(got) != 1 || got[0] != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestFieldsNothingApplied(t *testing.T) {
	if f := Fields(Outcome{Rejected: true}); len(f) != 0 {
		t.Fatalf("fields %v for an outcome with no limit", f)
	}
	h := http.Header{}
	Set(h, Outcome{})
	if len(h) != 0 {
		t.Fatalf("header %v for an outcome with no limit", h)
	}
}

func TestSFString(t *testing.T) {
	if got := string(appendSFString(nil, "a\"b\\c\né")); got != `"a\"b\\c???"` {
		t.Fatalf("sf-string %s", got)
	}
}

func TestSetAllocations(t *testing.T) {
	h := http.Header{}
	o := ForDecision("limit", time.Minute, algorithm.Decision{Allowed: true, Limit: 10, Remaining: 3, ResetAfter: time.Second})
	if n := testing.AllocsPerRun(100, func() { Set(h, o) }); n > 2 {
		t.Fatalf("Set allocates %v times, want at most 2", n)
	}
}
