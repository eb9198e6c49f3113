package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

const testRules = `
domain: agents
rules:
  - name: calls-per-agent
    match: {agent: "*"}
    count_by: [agent]
    limit: 20
    calendar: {period: day, zone: UTC}
    warn_at: 0.8
  - name: calls-per-agent-and-tool
    match: {agent: "*", tool: "*"}
    count_by: [agent, tool]
    limit: 12
    calendar: {period: day, zone: UTC}
  - name: concurrent-per-tool
    match: {tool: "*"}
    count_by: [tool]
    algorithm: concurrency
    limit: 3
    window: 1m
`

// mcpServer is a fake MCP server: tools/call takes 20 ms and is counted per
// tool, with the most calls of a tool it saw running at once.
type mcpServer struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	calls   map[string]int
	other   int
}

func (m *mcpServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req rpcRequest
	json.NewDecoder(r.Body).Decode(&req)
	w.Header().Set("Content-Type", "application/json")
	if req.Method != "tools/call" {
		m.mu.Lock()
		m.other++
		m.mu.Unlock()
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"search"},{"name":"shell"}]}}`, req.ID)
		return
	}
	tool := req.Params.Name
	m.mu.Lock()
	m.running[tool]++
	m.calls[tool]++
	m.most[tool] = max(m.most[tool], m.running[tool])
	m.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	m.mu.Lock()
	m.running[tool]--
	m.mu.Unlock()
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"done"}]}}`, req.ID)
}

func post(t *testing.T, url, agent, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if agent != "" {
		req.Header.Set("X-Agent", agent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestAgentBudgets: 6 agents call 2 tools at once, each (agent, tool) from
// its own goroutine until a daily budget refuses it (trying again when
// its tool is busy). Each agent gets
// exactly its 20 calls a day, none more than 12 on one tool; no tool ever
// runs more than 3 calls at once at the MCP server; refused calls never
// reach it; the warning header appears from an agent's 16th call; and
// every concurrency unit is given back when the calls end. Other methods
// pass uncounted.
func TestAgentBudgets(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	engine := rules.NewEngine(set, memstore.New(memstore.Options{}))
	m := &mcpServer{running: map[string]int{}, most: map[string]int{}, calls: map[string]int{}}
	up := httptest.NewServer(m)
	defer up.Close()
	proxy := httptest.NewServer(New(engine, up.URL, up.Client(), nil))
	defer proxy.Close()

	if resp, body := post(t, proxy.URL, "a0", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); resp.StatusCode != 200 || !strings.Contains(body, "search") {
		t.Fatalf("tools/list: %d %s", resp.StatusCode, body)
	}
	if resp, body := post(t, proxy.URL, "", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search"}}`); resp.StatusCode != 400 {
		t.Fatalf("a call without X-Agent: %d %s", resp.StatusCode, body)
	}

	type tally struct{ ok, busy, warned, firstWarn int }
	var mu sync.Mutex
	got := map[string]*tally{}
	var wg sync.WaitGroup
	for a := range 6 {
		agent := fmt.Sprint("a", a)
		got[agent] = &tally{}
		for _, tool := range []string{"search", "shell"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				deadline := time.Now().Add(time.Minute)
				for i := 0; time.Now().Before(deadline); i++ {
					resp, body := post(t, proxy.URL, agent, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q}}`, i, tool))
					mu.Lock()
					tl := got[agent]
					switch {
					case resp.StatusCode == 200:
						tl.ok++
						if resp.Header.Get("RateLimit-Warning") != "" {
							tl.warned++
							if tl.firstWarn == 0 {
								tl.firstWarn = tl.ok
							}
						}
					case resp.StatusCode == 429 && strings.Contains(body, "concurrent-per-tool") && !strings.Contains(body, "calls-per"):
						tl.busy++
						mu.Unlock()
						time.Sleep(time.Millisecond) // the tool is busy: try again
						continue
					case resp.StatusCode == 429 && resp.Header.Get("Retry-After") != "":
						mu.Unlock()
						return // a daily budget is spent
					default:
						mu.Unlock()
						t.Errorf("agent %s tool %s: %d %s", agent, tool, resp.StatusCode, body)
						return
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	busy, answered := 0, 0
	for agent, tl := range got {
		busy += tl.busy
		answered += tl.ok
		// The server warns on the 16th to the 20th call it decides; an
		// agent's two tools call at once, so an answer can be tallied one
		// place before the call decided ahead of it.
		if tl.ok != 20 || tl.firstWarn < 15 || tl.firstWarn > 16 || tl.warned != 5 {
			t.Errorf("agent %s: %d calls answered (want 20), warned from call %d on, %d times (want 16 or 15, 5)", agent, tl.ok, tl.firstWarn, tl.warned)
		}
	}
	ctx := context.Background()
	for a := range 6 {
		for _, tool := range []string{"search", "shell"} {
			u, err := engine.Usage(ctx, rules.Request{Descriptors: []rules.Descriptor{{{Key: "agent", Value: fmt.Sprint("a", a)}, {Key: "tool", Value: tool}}}})
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range u.Statuses {
				if st.Rule == "calls-per-agent-and-tool" && st.Used > 12 {
					t.Errorf("agent a%d tool %s: %d calls, over the 12 a day", a, tool, st.Used)
				}
			}
		}
	}
	for _, tool := range []string{"search", "shell"} {
		if m.most[tool] > 3 || m.most[tool] < 2 {
			t.Errorf("tool %s ran %d calls at once at the server, want at most 3 (and the limit reached)", tool, m.most[tool])
		}
		u, err := engine.Usage(ctx, rules.Request{Descriptors: []rules.Descriptor{{{Key: "tool", Value: tool}}}})
		if err != nil {
			t.Fatal(err)
		}
		if u.Statuses[0].Decision.Remaining != 3 {
			t.Errorf("tool %s: %d of 3 concurrency units free after every call ended", tool, u.Statuses[0].Decision.Remaining)
		}
	}
	if total := m.calls["search"] + m.calls["shell"]; total != 6*20 || m.other != 1 {
		t.Errorf("the MCP server saw %d tool calls (want 120: refused calls never reach it) and %d other calls (want 1)", total, m.other)
	}
	t.Logf("%d calls answered; %d refused while their tool ran 3; most at once: search %d, shell %d", answered, busy, m.most["search"], m.most["shell"])
}
