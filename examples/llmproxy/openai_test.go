package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/server"
)

// moneyRules is a tenant's monthly money budget across two models, priced
// per million tokens; the proxy's input and output descriptors carry the
// model and the kind of tokens, which the rule prices.
const moneyRules = `
domain: llm
prices:
  unit: USD cent
  models:
    big:   {input: 2000, output: 8000}
    small: {input: 100, output: 400}
rules:
  - name: monthly-spend
    match: {tenant: "*", model: "*", tokens: "*"}
    count_by: [tenant]
    limit: 100
    calendar: {period: month, zone: America/New_York}
    cost: {usage: money}
    charge_after_response: true
`

// openaiClient installs the official openai package for Node.js into a
// cache directory outside the tree (once) and returns the directory the
// client script runs from; it skips the test, saying why, when node or npm
// is missing or the package cannot be installed.
func openaiClient(t *testing.T) string {
	t.Helper()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed: the openai client for Node.js cannot run (%v)", bin, err)
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "floodgate-llmproxy-openai")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--prefix", dir, "openai@6").CombinedOutput()
		if err != nil {
			t.Skipf("npm install openai failed, so the official client cannot run: %v\n%s", err, out)
		}
	}
	script, err := os.ReadFile("testdata/openai_client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "openai_client.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

type clientCall struct {
	Status int    `json:"status"`
	Text   string `json:"text"`
}

// runClient runs the openai client script in dir against the proxy.
func runClient(t *testing.T, dir, proxy, tenant, mode, model string, n int) []clientCall {
	t.Helper()
	args := []string{"openai_client.mjs", proxy + "/v1", mode, model}
	if n > 0 {
		args = append(args, strconv.Itoa(n))
	}
	cmd := exec.Command("node", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TENANT="+tenant)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %v: %v\n%s", args, err, out)
	}
	var calls []clientCall
	if err := json.Unmarshal(out, &calls); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	return calls
}

// startMoneyServer runs a real floodgate server and returns a Budget over
// RLS and the base URL of its JSON API.
func startMoneyServer(t *testing.T, rules string) (*Budget, string) {
	t.Helper()
	srv := runFloodgate(t, rules)
	return dialBudget(t, srv.Addr(server.ListenerGRPC)), "http://" + srv.Addr(server.ListenerHTTP)
}

// spent asks the server's /v1/usage what tenant has spent this month.
func spent(t *testing.T, api, tenant string) int64 {
	t.Helper()
	body := `{"domain":"llm","descriptors":[{"entries":[{"key":"tenant","value":"` + tenant + `"},{"key":"model","value":"big"},{"key":"tokens","value":"input"}]}]}`
	resp, err := http.Post(api+"/v1/usage", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Statuses []struct {
			Used int64 `json:"used"`
		} `json:"statuses"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Statuses) != 1 {
		t.Fatalf("/v1/usage: %v %+v", err, out)
	}
	return out.Statuses[0].Used
}

// TestOpenAIClientMoneyBudget drives the proxy with the official openai
// client for Node.js, streaming and not, on a tenant's monthly budget of
// 100 cents across two models. An answer of 1,000 input and 500 output
// tokens costs 2 + 4 = 6 cents on big and 1 + 1 = 2 on small (each kind
// of tokens rounded up). With 94 cents spent, 50 requests at once all pass
// the check (which counts nothing) while none has been charged: the
// tenant overspends by the answers in flight, each charged exactly, at
// most 50 x 6 cents; then it is refused (429) to the month's end.
func TestOpenAIClientMoneyBudget(t *testing.T) {
	dir := openaiClient(t)
	m := &model{input: 1000, output: 500, delay: 200 * time.Millisecond}
	up := httptest.NewServer(m)
	defer up.Close()
	budget, api := startMoneyServer(t, moneyRules)
	proxy := httptest.NewServer(New(budget, up.URL, up.Client(), nil))
	defer proxy.Close()

	if c := runClient(t, dir, proxy.URL, "acme", "one", "big", 0); c[0].Status != 200 || c[0].Text != "hi" {
		t.Fatalf("chat completion: %+v", c)
	}
	if got := spent(t, api, "acme"); got != 6 {
		t.Fatalf("after one answer on big: %d cents spent, want 6", got)
	}
	if c := runClient(t, dir, proxy.URL, "acme", "stream", "small", 0); c[0].Status != 200 || c[0].Text != "hello" {
		t.Fatalf("streamed chat completion: %+v", c)
	}
	if got := spent(t, api, "acme"); got != 8 {
		t.Fatalf("after a streamed answer on small: %d cents spent, want 8", got)
	}
	// Spend to 94 of 100: 43,000 input tokens on big are 86 cents.
	charge := `{"domain":"llm","descriptors":[{"entries":[{"key":"tenant","value":"acme"},{"key":"model","value":"big"},{"key":"tokens","value":"input"}]}],"usage":{"model":"big","input_tokens":43000}}`
	if resp, err := http.Post(api+"/v1/charge", "application/json", strings.NewReader(charge)); err != nil || resp.StatusCode != 200 {
		t.Fatalf("charge: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	before := m.calls()
	calls := runClient(t, dir, proxy.URL, "acme", "burst", "big", 50)
	ok, refused := 0, 0
	for _, c := range calls {
		switch c.Status {
		case 200:
			ok++
		case 429:
			refused++
		default:
			t.Fatalf("burst answer %+v", c)
		}
	}
	used := spent(t, api, "acme")
	t.Logf("burst of 50 at 94 of 100 cents: %d answered, %d refused; spent %d cents, %d over the budget (bound: 50 in flight x 6 = 300)",
		ok, refused, used, used-100)
	if m.calls()-before != ok || used != 94+6*int64(ok) || used-100 > 50*6 || ok == 0 {
		t.Fatalf("%d answered (the model saw %d), %d cents spent: want every answer charged 6 cents, at most 300 over", ok, m.calls()-before, used)
	}
	if c := runClient(t, dir, proxy.URL, "acme", "one", "small", 0); c[0].Status != 429 {
		t.Fatalf("after the burst: %+v, want 429", c)
	}
	if c := runClient(t, dir, proxy.URL, "globex", "one", "small", 0); c[0].Status != 200 {
		t.Fatalf("another tenant: %+v", c)
	}
}
