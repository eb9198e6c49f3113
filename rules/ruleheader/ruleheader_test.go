package ruleheader

import (
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/rules"
)

func TestFieldsSeveralRules(t *testing.T) {
	res := rules.Result{
		Allowed: false,
		Statuses: []rules.Status{
			{Rule: "per-member", Limit: 20, Window: time.Minute, Algorithm: algorithm.FixedWindow,
				Decision: algorithm.Decision{Allowed: true, Remaining: 7, ResetAfter: 1500 * time.Millisecond}},
			{Rule: "global", Limit: 1000, Window: 90*time.Second + time.Millisecond, Algorithm: algorithm.BoundedLog,
				Decision: algorithm.Decision{Allowed: false, Remaining: 0, ResetAfter: 30 * time.Second, RetryAfter: 2100 * time.Millisecond}},
			{Rule: "in-flight", Limit: 4, Algorithm: algorithm.Concurrency,
				Decision: algorithm.Decision{Allowed: true, Remaining: 3}},
			{Rule: "dark", Limit: 1, Window: time.Second, Shadow: true,
				Decision: algorithm.Decision{Allowed: false, RetryAfter: time.Hour}},
			{Rule: "vip", Unlimited: true, Decision: algorithm.Decision{Allowed: true}},
		},
		Tightest: 1,
	}
	got := map[string]string{}
	for _, f := range Fields(res) {
		got[f.Name] = f.Value
	}
	want := map[string]string{
		"X-RateLimit-Limit":     "1000",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "30",
		"RateLimit-Policy":      `"per-member";q=20;w=60, "global";q=1000;w=91, "in-flight";q=4;qu="concurrent-requests"`,
		// The rejecting rule's t is its retry-after, not its full reset.
		"RateLimit": `"per-member";r=7;t=2, "global";r=0;t=3, "in-flight";r=3;t=0`,
		// The shadow rule's hour does not count: only enforcing rejections.
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

func TestFieldsOneItemPerRule(t *testing.T) {
	res := rules.Result{Allowed: true, Tightest: 0, Statuses: []rules.Status{
		{Rule: "per-ip", Descriptor: 0, Limit: 10, Window: time.Second, Decision: algorithm.Decision{Allowed: true, Remaining: 9}},
		{Rule: "per-ip", Descriptor: 1, Limit: 10, Window: time.Second, Decision: algorithm.Decision{Allowed: true, Remaining: 2}},
	}}
	for _, f := range Fields(res) {
		if f.Name == "RateLimit" && f.Value != `"per-ip";r=2;t=0` {
			t.Fatalf("RateLimit %q: want one item, the tighter status", f.Value)
		}
	}
}

func TestFieldsNothingApplied(t *testing.T) {
	if f := Fields(rules.Result{Allowed: true, Tightest: -1}); len(f) != 0 {
		t.Fatalf("fields %v for a request no rule limited", f)
	}
}

// TestWarningField: RateLimit-Warning names the enforcing rules in warning,
// each once, in rule order, and is left out when none is.
func TestWarningField(t *testing.T) {
	res := rules.Result{Allowed: true, Tightest: 0, Statuses: []rules.Status{
		{Rule: "monthly", Limit: 100, Window: time.Hour, Warning: true, Decision: algorithm.Decision{Allowed: true, Remaining: 10}},
		{Rule: "daily", Limit: 10, Window: time.Hour, Decision: algorithm.Decision{Allowed: true, Remaining: 9}},
		{Rule: "monthly", Descriptor: 1, Limit: 100, Window: time.Hour, Warning: true, Decision: algorithm.Decision{Allowed: true, Remaining: 5}},
		{Rule: "dark", Limit: 10, Window: time.Hour, Warning: true, Shadow: true, Decision: algorithm.Decision{Allowed: true, Remaining: 1}},
		{Rule: "per-tool", Limit: 10, Window: time.Hour, Warning: true, Decision: algorithm.Decision{Allowed: true, Remaining: 1}},
	}}
	got := ""
	for _, f := range Fields(res) {
		if f.Name == Warning {
			got = f.Value
		}
	}
	if got != "monthly, per-tool" {
		t.Fatalf("%s = %q, want %q", Warning, got, "monthly, per-tool")
	}
	h := http.Header{}
	Set(h, res)
	if h.Get("RateLimit-Warning") != "monthly, per-tool" {
		t.Fatalf("Set: header %v", h)
	}
	res.Statuses = res.Statuses[1:2]
	h = http.Header{"Ratelimit-Warning": {"stale"}}
	Set(h, res)
	for _, f := range Fields(res) {
		if f.Name == Warning {
			t.Fatalf("warning field %q with no rule in warning", f.Value)
		}
	}
	if h.Get(Warning) != "" {
		t.Fatalf("Set left a warning with no rule in warning: %v", h)
	}
}
