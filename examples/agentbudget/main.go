// Command agentbudget is an example: a proxy in front of a Model Context
// Protocol server (streamable HTTP: JSON-RPC over POST) that holds agents
// to tool-call budgets with Floodgate's rule engine, in process:
//
//	go run ./examples/agentbudget -rules examples/agentbudget/rules.yaml -upstream http://127.0.0.1:3000/mcp
//
// Each tools/call request (the agent named by the X-Agent header, the tool
// by params.name) is checked against three descriptors: {agent}, {agent,
// tool} and {tool}. The example's rules.yaml gives each agent 500 calls a
// day, 100 per tool, and lets each tool run at most 4 calls at once: a
// concurrency rule whose unit is held while the call runs and given back
// when the MCP server has answered. A call over a budget gets HTTP 429 with
// Retry-After and a JSON-RPC error naming the rule, and never reaches the
// server; other methods (initialize, tools/list, ...) pass uncounted. A
// budget in warning (warn_at) is named in the RateLimit-Warning header.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strconv"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/rules/ruleheader"
)

// maxBody bounds the request bodies the proxy reads.
const maxBody = 1 << 20

func main() {
	listen := flag.String("listen", "127.0.0.1:8092", "address to serve on")
	upstream := flag.String("upstream", "", "URL of the MCP server's endpoint")
	rulesFile := flag.String("rules", "examples/agentbudget/rules.yaml", "rule file")
	flag.Parse()
	if *upstream == "" {
		log.Fatal("agentbudget: -upstream is required")
	}
	data, err := os.ReadFile(*rulesFile)
	if err != nil {
		log.Fatal(err)
	}
	set, err := rules.Parse(*rulesFile, data)
	if err != nil {
		log.Fatal(err)
	}
	p := New(rules.NewEngine(set, memstore.New(memstore.Options{})), *upstream, http.DefaultClient, nil)
	log.Fatal(http.ListenAndServe(*listen, p))
}

// Proxy holds agents to tool-call budgets in front of an MCP server.
type Proxy struct {
	engine   *rules.Engine
	upstream string
	client   *http.Client
	log      *slog.Logger
}

// New returns a Proxy deciding with engine and forwarding to upstream with
// client; log receives failures (nil means slog.Default()).
func New(engine *rules.Engine, upstream string, client *http.Client, log *slog.Logger) *Proxy {
	if log == nil {
		log = slog.Default()
	}
	return &Proxy{engine: engine, upstream: upstream, client: client, log: log}
}

// rpcRequest is the part of a JSON-RPC request the proxy reads.
type rpcRequest struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name string `json:"name"`
	} `json:"params"`
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(w, "request body unreadable or over 1 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	var call rpcRequest
	if r.Method != http.MethodPost || json.Unmarshal(body, &call) != nil || call.Method != "tools/call" {
		p.forward(w, r, body) // not a tool call (or not one we can read): the server answers it
		return
	}
	agent := r.Header.Get("X-Agent")
	if agent == "" || call.Params.Name == "" {
		rpcError(w, http.StatusBadRequest, call.ID, -32602, "tools/call needs an X-Agent header and params.name")
		return
	}
	req := rules.Request{Descriptors: []rules.Descriptor{
		{{Key: "agent", Value: agent}},
		{{Key: "agent", Value: agent}, {Key: "tool", Value: call.Params.Name}},
		{{Key: "tool", Value: call.Params.Name}},
	}}
	res, err := p.engine.Check(r.Context(), req)
	if err != nil {
		p.log.Warn("agentbudget: cannot decide", "err", err)
		w.Header().Set("Retry-After", "1")
		rpcError(w, http.StatusServiceUnavailable, call.ID, -32000, "tool budget unavailable: retry later")
		return
	}
	ruleheader.Set(w.Header(), res)
	if !res.Allowed {
		retry := int64(math.Ceil(res.RetryAfter().Seconds()))
		w.Header().Set("Retry-After", strconv.FormatInt(max(retry, 1), 10))
		rpcError(w, http.StatusTooManyRequests, call.ID, -32000, fmt.Sprintf("tool budget spent: %v", res.Rejected))
		return
	}
	if res.Lease != "" {
		// The concurrency units are held until the server has answered.
		defer func() {
			if _, err := p.engine.Release(context.WithoutCancel(r.Context()), req, res.Lease); err != nil {
				p.log.Warn("agentbudget: release failed", "err", err)
			}
		}()
	}
	p.forward(w, r, body)
}

// forward sends body to the MCP server and copies its answer to w.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, body []byte) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.upstream, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for _, h := range []string{"Content-Type", "Accept", "Mcp-Session-Id", "Mcp-Protocol-Version", "Authorization"} {
		if v := r.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	resp, err := p.client.Do(out)
	if err != nil {
		http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		if k != "Content-Length" {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// rpcError answers a JSON-RPC error with the HTTP status code.
func rpcError(w http.ResponseWriter, code int, id json.RawMessage, rpcCode int, msg string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": rpcCode, "message": msg}})
}
