package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/syncbuf"
)

// TestCalendarAnswers: a monthly budget from the 15th in New York time,
// read through the server's front ends on a virtual clock 29.75 s before
// the period ends (a period 31 days and 1 hour long: the clocks went back
// on November 2). The JSON API's RateLimit, RateLimit-Policy,
// X-RateLimit-Reset and Retry-After, the status's reset_after_ms and
// period_end, and RLS's duration_until_reset and headers all say exactly
// when the period ends; at the boundary the count starts afresh and the
// policy names the next period's 30 days.
func TestCalendarAnswers(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(file, []byte(`
domain: llm
rules:
  - name: monthly
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 2
    calendar: {period: month, zone: America/New_York, start: 15}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	end := time.Date(2025, 11, 15, 0, 0, 0, 0, ny)
	start := time.Date(2025, 10, 15, 0, 0, 0, 0, ny)
	var clock atomic.Int64
	clock.Store(end.Add(-29750 * time.Millisecond).UnixNano())
	cfg := testConfig()
	cfg.Rules = file
	cfg.RLS.Headers = true
	srv, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(&syncbuf.Buffer{}, nil)),
		WithClock(func() time.Time { return time.Unix(0, clock.Load()) }))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{srv: srv, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- srv.Serve(ctx) }()
	t.Cleanup(func() { r.shutdown(t) })

	check := func() (CheckAnswer, http.Header, map[string]any) {
		t.Helper()
		body := `{"domain":"llm","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]}`
		resp, err := http.Post(r.url("/v1/check"), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out CheckAnswer
		var raw map[string]any
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatal(err)
		}
		return out, resp.Header, raw["statuses"].([]any)[0].(map[string]any)
	}
	period := int64(end.Sub(start) / time.Second) // 31 days and 1 hour
	if period != 31*86400+3600 {
		t.Fatalf("test's period %d s", period)
	}
	policy := `"monthly";q=2;w=` + strconv.FormatInt(period, 10)
	for i, want := range []string{`"monthly";r=1;t=30`, `"monthly";r=0;t=30`} {
		out, h, st := check()
		if !out.Allowed || h.Get("RateLimit") != want || h.Get("RateLimit-Policy") != policy || h.Get("X-RateLimit-Reset") != "30" {
			t.Fatalf("request %d: allowed %v, RateLimit %q, RateLimit-Policy %q, X-RateLimit-Reset %q; want %q, %q, 30",
				i+1, out.Allowed, h.Get("RateLimit"), h.Get("RateLimit-Policy"), h.Get("X-RateLimit-Reset"), want, policy)
		}
		if st["reset_after_ms"] != 29750.0 || st["period_end"] != end.UTC().Format(time.RFC3339Nano) ||
			st["calendar"] != "month from the 15th in America/New_York" {
			t.Fatalf("request %d status: %v", i+1, st)
		}
	}
	out, h, _ := check()
	if out.Allowed || h.Get("Retry-After") != "30" || h.Get("RateLimit") != `"monthly";r=0;t=30` {
		t.Fatalf("third request: allowed %v, Retry-After %q, RateLimit %q; want rejected, 30", out.Allowed, h.Get("Retry-After"), h.Get("RateLimit"))
	}

	c, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	resp, err := c.ShouldRateLimit(context.Background(), rlsReq("llm", "tenant", "acme"))
	if err != nil {
		t.Fatal(err)
	}
	ds := resp.GetStatuses()[0]
	if got := ds.GetDurationUntilReset().AsDuration(); got != 29750*time.Millisecond || ds.GetCode().String() != "OVER_LIMIT" {
		t.Fatalf("RLS: %v, duration_until_reset %v; want OVER_LIMIT, 29.75s", ds.GetCode(), got)
	}
	if got := rlsHeader(resp, "RateLimit-Policy"); got != policy {
		t.Fatalf("RLS RateLimit-Policy %q, want %q", got, policy)
	}

	// The boundary: a fresh count, the next period's 30 days.
	clock.Store(end.UnixNano())
	out, h, st := check()
	next := time.Date(2025, 12, 15, 0, 0, 0, 0, ny)
	if !out.Allowed || h.Get("RateLimit-Policy") != `"monthly";q=2;w=2592000` || h.Get("RateLimit") != `"monthly";r=1;t=2592000` ||
		st["period_end"] != next.UTC().Format(time.RFC3339Nano) {
		t.Fatalf("at the boundary: allowed %v, RateLimit-Policy %q, RateLimit %q, period_end %v", out.Allowed,
			h.Get("RateLimit-Policy"), h.Get("RateLimit"), st["period_end"])
	}
}
