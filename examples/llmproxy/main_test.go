package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/server"
)

// startServer runs a real floodgate server with rules and returns a
// Budget asking it over RLS.
func startServer(t *testing.T, rules string) *Budget {
	t.Helper()
	return dialBudget(t, runFloodgate(t, rules).Addr(server.ListenerGRPC))
}

// runFloodgate runs a real floodgate server with rules on loopback ports
// until the test ends.
func runFloodgate(t *testing.T, rules string) *server.Server {
	t.Helper()
	path := filepath.Join(t.TempDir(), "budget.yaml")
	if err := os.WriteFile(path, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.HTTP.Addr, cfg.GRPC.Addr, cfg.Rules = "127.0.0.1:0", "127.0.0.1:0", path
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv
}

func dialBudget(t *testing.T, addr string) *Budget {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &Budget{RLS: rlsv3.NewRateLimitServiceClient(conn), Domain: "llm"}
}

// model is a fake OpenAI-compatible API that uses the given tokens per
// answer, streaming when asked; it records the request bodies it got.
type model struct {
	input, output int64
	// delay is how long an answer takes.
	delay  time.Duration
	mu     sync.Mutex
	bodies []map[string]any
}

func (m *model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	m.mu.Lock()
	m.bodies = append(m.bodies, body)
	m.mu.Unlock()
	time.Sleep(m.delay)
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, m.input, m.output, m.input+m.output)
	if body["stream"] != true {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices":[{"message":{"content":"hi"}}],"usage":%s}`, usage)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, word := range []string{"hel", "lo"} {
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}],\"usage\":null}\n\n", word)
		w.(http.Flusher).Flush()
	}
	if opts, _ := body["stream_options"].(map[string]any); opts["include_usage"] == true {
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":%s}\n\n", usage)
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

func (m *model) calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.bodies)
}

// ask posts body for tenant through the proxy and returns the answer.
func ask(t *testing.T, proxy, tenant, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", proxy+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-Tenant", tenant)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, string(out)
}

const totalRules = `
domain: llm
rules:
  - name: tokens-per-tenant
    match: {tenant: "*", tokens: total}
    count_by: [tenant]
    limit: 10000
    window: 1h
    charge_after_response: true
`

// TestProxyHoldsTheBudget: a model that uses 6,000 tokens per answer on a
// 10,000 budget: the second answer takes the tenant into debt and the third
// request is rejected before it reaches the model. The headers carry the
// window the server gave (an hour), not one the proxy assumed.
func TestProxyHoldsTheBudget(t *testing.T) {
	m := &model{input: 1000, output: 5000}
	up := httptest.NewServer(m)
	defer up.Close()
	proxy := httptest.NewServer(New(startServer(t, totalRules), up.URL, up.Client(), nil))
	defer proxy.Close()

	for i, want := range []int{200, 200, 429} {
		resp, _ := ask(t, proxy.URL, "acme", `{"model":"m"}`)
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != `"tokens";q=10000;w=3600` {
			t.Errorf("request %d: RateLimit-Policy %q", i, got)
		}
		if want == 429 && resp.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	if m.calls() != 2 {
		t.Fatalf("the model answered %d times, want 2", m.calls())
	}
	if resp, _ := ask(t, proxy.URL, "globex", `{"model":"m"}`); resp.StatusCode != 200 {
		t.Fatalf("another tenant: %d", resp.StatusCode)
	}
}

// TestProxyStreams: a streamed answer reaches the client chunk by chunk; the
// proxy asks the model for the usage chunk, charges it, and keeps it from a
// client that did not ask for it, and passes it to one that did.
func TestProxyStreams(t *testing.T) {
	m := &model{input: 1000, output: 5000}
	up := httptest.NewServer(m)
	defer up.Close()
	proxy := httptest.NewServer(New(startServer(t, totalRules), up.URL, up.Client(), nil))
	defer proxy.Close()

	resp, body := ask(t, proxy.URL, "acme", `{"model":"m","stream":true}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !strings.Contains(body, `"hel"`) || !strings.Contains(body, `"lo"`) || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("stream relayed as %q", body)
	}
	if strings.Contains(body, "total_tokens") {
		t.Fatalf("the usage chunk the proxy asked for reached the client: %q", body)
	}
	if opts, _ := m.bodies[0]["stream_options"].(map[string]any); opts["include_usage"] != true {
		t.Fatalf("the model was not asked for usage: %v", m.bodies[0])
	}

	_, body = ask(t, proxy.URL, "acme", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`)
	if !strings.Contains(body, `"total_tokens":6000`) {
		t.Fatalf("a client that asked for usage did not get it: %q", body)
	}
	// 12,000 tokens charged from the two streams' usage: in debt.
	if resp, _ := ask(t, proxy.URL, "acme", `{"model":"m","stream":true}`); resp.StatusCode != 429 {
		t.Fatalf("after two streams of 6,000 tokens: %d, want 429", resp.StatusCode)
	}
}

// TestProxyModelBudgets: input and output budgets per model, beside the
// tenant's total: spending one model's output budget stops that model, not
// another.
func TestProxyModelBudgets(t *testing.T) {
	rules := `
domain: llm
rules:
  - name: output-per-model
    match: {tenant: "*", model: big, tokens: output}
    count_by: [tenant, model]
    limit: 1000
    window: 1m
    charge_after_response: true
  - name: input-per-model
    match: {tenant: "*", model: "*", tokens: input}
    count_by: [tenant, model]
    limit: 100000
    window: 1m
    charge_after_response: true
`
	m := &model{input: 200, output: 1500}
	up := httptest.NewServer(m)
	defer up.Close()
	proxy := httptest.NewServer(New(startServer(t, rules), up.URL, up.Client(), nil))
	defer proxy.Close()

	for i, c := range []struct {
		model string
		want  int
	}{{"big", 200}, {"big", 429}, {"small", 200}, {"small", 200}} {
		resp, _ := ask(t, proxy.URL, "acme", fmt.Sprintf(`{"model":%q}`, c.model))
		if resp.StatusCode != c.want {
			t.Fatalf("request %d (%s): %d, want %d", i, c.model, resp.StatusCode, c.want)
		}
		if c.want == 429 && resp.Header.Get("X-RateLimit-Limit") != "1000" {
			t.Errorf("429 names the limit %q, want the output budget's 1000", resp.Header.Get("X-RateLimit-Limit"))
		}
	}
}

// TestProxyServerDown: with no Floodgate server, requests get 503 and no
// rate-limit headers, and the outage is logged once, not once a request.
func TestProxyServerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	m := &model{}
	up := httptest.NewServer(m)
	defer up.Close()
	var logs bytes.Buffer
	proxy := httptest.NewServer(New(dialBudget(t, addr), up.URL, up.Client(), slog.New(slog.NewTextHandler(&logs, nil))))
	defer proxy.Close()

	for i := 0; i < 5; i++ {
		resp, _ := ask(t, proxy.URL, "acme", `{"model":"m"}`)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("request %d: %d, want 503", i, resp.StatusCode)
		}
		if h := resp.Header.Get("X-RateLimit-Limit"); h != "" {
			t.Fatalf("503 with X-RateLimit-Limit %q", h)
		}
	}
	if m.calls() != 0 {
		t.Fatalf("the model was called %d times during the outage", m.calls())
	}
	lines := 0
	for sc := bufio.NewScanner(&logs); sc.Scan(); {
		if strings.Contains(sc.Text(), "token budget unavailable") {
			lines++
		}
	}
	if lines != 1 {
		t.Fatalf("%d log lines for 5 refused requests, want 1:\n%s", lines, logs.String())
	}
}

func TestReadRequest(t *testing.T) {
	for _, c := range []struct {
		name, body string
		model      string
		stream     bool
		asked      bool
	}{
		{"plain", `{"model":"m"}`, "m", false, false},
		{"stream", `{"model":"m","stream":true}`, "m", true, false},
		{"stream asking usage", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, "m", true, true},
		{"not json", `model=m`, "", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := readRequest([]byte(c.body))
			if r.Model != c.model || r.Stream != c.stream || r.AskedUsage != c.asked {
				t.Fatalf("%+v", r)
			}
			if c.stream && !bytes.Contains(r.Body, []byte(`"include_usage":true`)) {
				t.Fatalf("forwarded body %s does not ask for usage", r.Body)
			}
			if !c.stream && string(r.Body) != c.body {
				t.Fatalf("body changed to %s", r.Body)
			}
		})
	}
}

// FuzzRelay: any stream relays without panicking, and without hiding it
// passes every non-empty line on, in order.
func FuzzRelay(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[],\"usage\":{\"total_tokens\":3}}\n\n"))
	f.Add([]byte("event: x\r\ndata: {\n\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		relay(httptest.NewRecorder(), bytes.NewReader(in), true)
		w := httptest.NewRecorder()
		if _, err := relay(w, bytes.NewReader(in), false); err != nil {
			return // a line over the bound ends the stream
		}
		if got, want := lines(w.Body.Bytes()), lines(in); !slices.Equal(got, want) {
			t.Fatalf("relayed lines %q, want %q", got, want)
		}
	})
}

// lines returns the non-empty lines of b, without line ends.
func lines(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxEventLine)
	for sc.Scan() {
		if len(sc.Bytes()) > 0 {
			out = append(out, sc.Text())
		}
	}
	return out
}
