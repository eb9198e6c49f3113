package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const warnRules = `
domain: llm
rules:
  - name: monthly
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 10
    calendar: {period: month, zone: UTC}
    warn_at: 0.5
  - name: pages
    match: {path: {prefix: /p/}}
    count_by: [ip]
    limit: 4
    window: 1h
    algorithm: fixed-window
    warn_at: 0.5
`

// TestWarningEveryFrontEnd: a rule's warning level reached shows in every
// front end (the JSON API's field and header, the RLS response header, the
// gateway's header), is counted once per crossing in
// floodgate_rule_warnings_total, and logged once per key and period.
func TestWarningEveryFrontEnd(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(warnRules), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Rules = rulesFile
	cfg.RLS.Headers = true
	cfg.Gateway.Domain = "llm"
	cfg.Gateway.Routes = []Route{{Prefix: "/", Upstream: up.URL}}
	r := start(t, cfg)

	check := func(hits int) (CheckAnswer, http.Header) {
		t.Helper()
		body := `{"domain":"llm","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}],"hits":` + strconv.Itoa(hits) + `}`
		resp, err := http.Post(r.url("/v1/check"), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out CheckAnswer
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out, resp.Header
	}
	if out, h := check(4); out.Warning || out.Statuses[0].Warning || h.Get("RateLimit-Warning") != "" {
		t.Fatalf("4 of 10 at warn_at 0.5: %+v %v", out, h)
	}
	out, h := check(1)
	if !out.Warning || !out.Statuses[0].Warning || out.Statuses[0].WarnAt != 0.5 || out.Statuses[0].Used != 5 ||
		h.Get("RateLimit-Warning") != "monthly" {
		t.Fatalf("5 of 10 at warn_at 0.5: %+v, RateLimit-Warning %q", out, h.Get("RateLimit-Warning"))
	}
	// A charge past the level crosses nothing more; the key stays in
	// warning, in the answer's field and header.
	cresp, err := http.Post(r.url("/v1/charge"), "application/json",
		strings.NewReader(`{"domain":"llm","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}],"hits":2}`))
	if err != nil {
		t.Fatal(err)
	}
	cbody, _ := io.ReadAll(cresp.Body)
	cresp.Body.Close()
	if cresp.StatusCode != 200 || !strings.Contains(string(cbody), `"warning":true`) || cresp.Header.Get("RateLimit-Warning") != "monthly" {
		t.Fatalf("/v1/charge: %d %s, RateLimit-Warning %q", cresp.StatusCode, cbody, cresp.Header.Get("RateLimit-Warning"))
	}

	// /v1/usage through the server: the key's count and warning, counting nothing.
	for range 2 {
		code, body := post(t, r.url("/v1/usage"), `{"domain":"llm","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}],"hits":3}`)
		var u CheckAnswer
		if err := json.Unmarshal([]byte(body), &u); code != 200 || err != nil || !u.Warning || len(u.Statuses) != 1 ||
			u.Statuses[0].Used != 7 || u.Statuses[0].Remaining != 3 || u.Statuses[0].PeriodEnd == "" {
			t.Fatalf("/v1/usage: %d %s", code, body)
		}
	}

	// RLS: the same rule, the header among the response headers.
	c, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	resp, err := c.ShouldRateLimit(context.Background(), rlsReq("llm", "tenant", "acme"))
	if err != nil {
		t.Fatal(err)
	}
	if got := rlsHeader(resp, "RateLimit-Warning"); got != "monthly" {
		t.Fatalf("RLS RateLimit-Warning %q, want monthly (headers %v)", got, resp.ResponseHeadersToAdd)
	}

	// The gateway: the second of four pages reaches the level.
	gw := "http://" + r.srv.Addr(ListenerGateway)
	for i, want := range []string{"", "pages", "pages", "pages"} {
		resp, err := http.Get(gw + "/p/1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("RateLimit-Warning"); got != want {
			t.Fatalf("gateway request %d: RateLimit-Warning %q, want %q", i+1, got, want)
		}
	}

	_, metrics := httpGet(t, r.url("/metrics"))
	for _, m := range []string{`floodgate_rule_warnings_total{rule="monthly"} 1`, `floodgate_rule_warnings_total{rule="pages"} 1`} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	waitFor(t, "two warning records", func() bool { return strings.Count(r.logs.String(), "rule warning level reached") == 2 })
	logs := r.logs.String()
	if !strings.Contains(logs, "rule=monthly key=") || !strings.Contains(logs, "warn_at=0.5") || !strings.Contains(logs, "period=") {
		t.Fatalf("warning log records:\n%s", logs)
	}
}

// CheckAnswer is the part of a /v1/check answer these tests read.
type CheckAnswer struct {
	Allowed  bool `json:"allowed"`
	Warning  bool `json:"warning"`
	Statuses []struct {
		Rule      string  `json:"rule"`
		Limit     int64   `json:"limit"`
		Used      int64   `json:"used"`
		Remaining int64   `json:"remaining"`
		PeriodEnd string  `json:"period_end"`
		WarnAt    float64 `json:"warn_at"`
		Warning   bool    `json:"warning"`
		Allowed   bool    `json:"allowed"`
		Window    string  `json:"window"`
	} `json:"statuses"`
}

func rlsHeader(resp *rlsv3.RateLimitResponse, name string) string {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if strings.EqualFold(h.GetKey(), name) {
			return h.GetValue()
		}
	}
	return ""
}
