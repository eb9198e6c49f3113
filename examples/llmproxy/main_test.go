package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/server"
	"github.com/floodgate-dev/floodgate/rlsclient"
)

const budgetRules = `
domain: llm
rules:
  - name: tokens-per-tenant
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 10000
    window: 1m
    charge_after_response: true
`

// TestProxyHoldsTheBudget runs the proxy against a real Floodgate server
// and a fake model that uses 6,000 tokens per answer: the second answer
// takes the tenant past its 10,000 budget, and the third request is
// rejected before it reaches the model.
func TestProxyHoldsTheBudget(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "budget.yaml")
	os.WriteFile(rules, []byte(budgetRules), 0o644)
	cfg := server.DefaultConfig()
	cfg.HTTP.Addr, cfg.GRPC.Addr, cfg.Rules = "127.0.0.1:0", "127.0.0.1:0", rules
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	calls := 0
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"total_tokens":6000}}`)
	}))
	defer model.Close()

	budget, err := rlsclient.New(srv.Addr(server.ListenerGRPC), rlsclient.Options{Domain: "llm", EntryKey: "tenant", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer budget.Close()
	proxy := httptest.NewServer(&Proxy{Budget: budget, Upstream: model.URL, Client: model.Client()})
	defer proxy.Close()

	for i, want := range []int{200, 200, 429} {
		req, _ := http.NewRequest("POST", proxy.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("X-Tenant", "acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
		}
		if want == 429 && resp.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	if calls != 2 {
		t.Fatalf("the model answered %d times, want 2", calls)
	}
}
