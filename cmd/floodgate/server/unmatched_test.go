package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Requests no rule applies to are counted by domain label in /metrics and
// on the status page, logged once a minute with an example, and said in the
// JSON answer, whichever front end they came through; RLS answers stay
// plain OK. /json answers as envoyproxy/ratelimit does.
func TestUnmatchedVisible(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(rulesFile, []byte(`
domain: myapp
rules:
  - name: loan
    match: {path: {prefix: /loan/}}
    count_by: [ip]
    limit: 1
    window: 1h
`), 0o644)
	cfg := testConfig()
	cfg.Rules = rulesFile
	cfg.Gateway.Domain = "myapp"
	cfg.Gateway.Routes = []Route{{Prefix: "/", Upstream: up.URL}}
	r := start(t, cfg)

	// Two with an unknown domain (RLS, JSON API), three of a known domain
	// that match no rule (gateway, JSON API, /json).
	c, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, rlsReq("default", "client", "acme"))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 1 || resp.Statuses[0].CurrentLimit != nil {
		t.Fatalf("RLS answer for an unknown domain: %v %v", resp, err)
	}
	hr, err := http.Post(r.url("/v1/check"), "application/json", strings.NewReader(`{"domain":"default","descriptors":[{"entries":[{"key":"client","value":"acme"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if code, _ := httpGet(t, "http://"+r.srv.Addr(ListenerGateway)+"/catalog"); code != 200 {
		t.Fatalf("gateway: %d", code)
	}
	hr, err = http.Post(r.url("/v1/check"), "application/json", strings.NewReader(`{"domain":"myapp","descriptors":[{"entries":[{"key":"path","value":"/"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	hr, err = http.Post(r.url("/json"), "application/json", strings.NewReader(`{"domain":"myapp","descriptors":[{"entries":[{"key":"path","value":"/"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != 200 {
		t.Fatalf("/json: %d", hr.StatusCode)
	}

	_, metrics := httpGet(t, r.url("/metrics"))
	for _, want := range []string{`floodgate_unmatched_requests_total{domain="other"} 2`, `floodgate_unmatched_requests_total{domain="myapp"} 3`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	_, feed := httpGet(t, r.url("/status.json"))
	if !strings.Contains(feed, `"unmatched_by_domain":[{"domain":"myapp","reason":"rules","count":3},{"domain":"other","reason":"domain","count":2}]`) {
		t.Errorf("status.json: %s", feed)
	}
	logs := r.logs.String()
	if n := strings.Count(logs, "matched no rule"); n != 1 {
		t.Errorf("%d unmatched records within a minute, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs, `example="client=acme"`) {
		t.Errorf("the record has no example:\n%s", logs)
	}
}
