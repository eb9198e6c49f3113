package httplimit

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// jsonEncoded is rej as encoding/json's Encoder writes it.
func jsonEncoded(t *testing.T, rej *Rejection) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(rej); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestRejectionJSONAsEncodingJSON(t *testing.T) {
	for _, c := range []struct {
		name string
		rej  Rejection
	}{
		{"decision", decisionRejection("per-key", time.Minute, algorithm.Decision{Limit: 100, RetryAfter: 1500 * time.Millisecond, Reason: algorithm.ReasonOverLimit})},
		{"empty", Rejection{}},
		{"escapes", Rejection{Rule: "a\"b\\c\n\r\t\b\f\x01<>&\u2028\u2029é\xff", Rules: []string{}, Message: "x"}},
		{"small window", Rejection{WindowSeconds: 1e-9, Window: window.Format(time.Nanosecond)}},
		{"large window", Rejection{WindowSeconds: 1e22}},
		{"fractional window", Rejection{WindowSeconds: (1500 * time.Millisecond).Seconds(), Window: window.Format(1500 * time.Millisecond)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, want := string(c.rej.appendJSON(nil)), jsonEncoded(t, &c.rej); got != want {
				t.Fatalf("appendJSON\n%s\nencoding/json\n%s", got, want)
			}
		})
	}
}

func FuzzRejectionJSON(f *testing.F) {
	f.Add("per-ip", "over_limit", "1m", 60.0, int64(10), int64(0), int64(3))
	f.Add("\x00\"<tag>&\u2028\xc3", "", "1h30m", 1e-7, int64(-1), int64(math.MaxInt64), int64(1))
	f.Add("é日本", "x", "", 1e21, int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, rule, reason, window string, secs float64, limit, remaining, retry int64) {
		if math.IsNaN(secs) || math.IsInf(secs, 0) {
			return // encoding/json refuses them
		}
		rej := Rejection{Type: ProblemQuotaExceeded, Title: problemTitle, Error: problemError, ViolatedPolicies: []string{rule, reason},
			Rule: rule, Rules: []string{rule}, Limit: limit, Window: window, WindowSeconds: secs,
			Remaining: remaining, RetryAfter: retry, Reason: algorithm.Reason(reason), Message: window + rule}
		if got, want := string(rej.appendJSON(nil)), jsonEncoded(t, &rej); got != want {
			t.Fatalf("appendJSON\n%s\nencoding/json\n%s", got, want)
		}
	})
}

// LimitBy's 429 is the problem body a client decodes as a Rejection.
func TestLimitByRejectionBody(t *testing.T) {
	lim := rejectAll{}
	rec := httptest.NewRecorder()
	LimitBy(lim, KeyByHeader("X-Key"))(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusBadRequest || rec.Body.String() != `{"error":"missing X-Key header"}`+"\n" {
		t.Fatalf("no key: %d %q, want 400 and the error", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-Key", "k")
	LimitBy(lim, KeyByHeader("X-Key"))(http.NotFoundHandler()).ServeHTTP(rec, req)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Content-Type") != "application/problem+json" || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("rejected: %d %v", rec.Code, rec.Header())
	}
	var body Rejection
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	if body.Type != ProblemQuotaExceeded || body.Rule != "limit" || len(body.ViolatedPolicies) != 1 || body.Limit != 5 ||
		body.Window != "1m" || body.WindowSeconds != 60 || body.RetryAfter != 3 || body.Reason != algorithm.ReasonOverLimit || body.Message == "" {
		t.Fatalf("body %+v", body)
	}
}

// rejectAll rejects every request, 5 per minute, for 2.5 s.
type rejectAll struct{}

func (rejectAll) Allow(context.Context, string) (algorithm.Decision, error) {
	return algorithm.Decision{Limit: 5, RetryAfter: 2500 * time.Millisecond, Reason: algorithm.ReasonOverLimit}, nil
}

func (rejectAll) Limit() algorithm.Config {
	return algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Minute}
}
