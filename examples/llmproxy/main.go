// Command llmproxy is an example: a proxy in front of an OpenAI-compatible
// API that holds each tenant to token budgets kept by a central Floodgate
// server. The cost of a request (the tokens the model used) is known only
// after the answer, so the proxy checks the budgets before forwarding and
// charges the tokens after:
//
//	floodgate serve --rules budget.yaml
//	go run ./examples/llmproxy -floodgate 127.0.0.1:8081 -upstream https://api.example.com
//
// Each request is asked about three budgets, as RLS descriptors of the
// domain "llm": the tenant's total tokens {tenant, tokens: total}, and the
// input and output tokens of the model the body names {tenant, model,
// tokens: input|output}. The rule file limits any of them; a budget no
// rule matches is not limited. The rules charge after the response:
//
//	domain: llm
//	rules:
//	  - name: tokens-per-tenant
//	    match: {tenant: "*", tokens: total}
//	    count_by: [tenant]
//	    limit: 100000
//	    window: 1m
//	    charge_after_response: true
//	  - name: output-tokens-per-model
//	    match: {tenant: "*", model: "*", tokens: output}
//	    count_by: [tenant, model]
//	    limit: 20000
//	    window: 1m
//	    charge_after_response: true
//
// A budget in money prices the input and output descriptors by their model
// (docs/budgets.md): a rule file's prices table and a rule such as
//
//	rules:
//	  - name: monthly-spend
//	    match: {tenant: "*", model: "*", tokens: "*"}
//	    count_by: [tenant]
//	    limit: 5000
//	    calendar: {period: month, zone: America/New_York}
//	    cost: {usage: money}
//	    charge_after_response: true
//
// A tenant that spends past a budget is in debt: its requests are rejected
// with 429 until the tokens that took it over have left the window, so it
// overspends by at most the answers it had in flight. Every answer the
// model produced is charged, whoever hung up: a client that leaves does
// not cancel the call to the model, and the proxy reads the answer to its
// end. Streamed answers ("stream": true, server-sent events) are relayed as
// they come; the proxy asks the model for the usage chunk at the end of
// the stream (stream_options.include_usage) and keeps that chunk from a
// client that did not ask for it. When the Floodgate server cannot answer, requests
// get 503 (not 429: the tenant did nothing wrong) and a log line, at most
// one every ten seconds.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log"
	"log/slog"
	"net/http"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/ratelimitheader"
)

// maxBody bounds the bodies the proxy reads.
const maxBody = 8 << 20

func main() {
	listen := flag.String("listen", "127.0.0.1:8090", "address to serve on")
	upstream := flag.String("upstream", "", "base URL of the OpenAI-compatible API")
	server := flag.String("floodgate", "127.0.0.1:8081", "gRPC address of floodgate serve")
	domain := flag.String("domain", "llm", "rule domain of the budgets")
	flag.Parse()
	if *upstream == "" {
		log.Fatal("llmproxy: -upstream is required")
	}
	conn, err := grpc.NewClient(*server, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	budget := &Budget{RLS: rlsv3.NewRateLimitServiceClient(conn), Domain: *domain}
	p := New(budget, strings.TrimRight(*upstream, "/"), &http.Client{Timeout: 10 * time.Minute}, slog.Default())
	srv := &http.Server{Addr: *listen, Handler: p, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// Proxy forwards requests to Upstream within each tenant's token budgets.
// The tenant is the X-Tenant header.
type Proxy struct {
	Budget   *Budget
	Upstream string
	Client   *http.Client
	Logger   *slog.Logger

	logs *floodgate.Limiter // one line per message every ten seconds
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tenant := r.Header.Get("X-Tenant")
	if tenant == "" {
		http.Error(w, "missing X-Tenant header", http.StatusBadRequest)
		return
	}
	in, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(in) > maxBody {
		http.Error(w, "request body unreadable or over 8 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	req := readRequest(in)
	v, err := p.Budget.Check(r.Context(), tenant, req.Model)
	if err != nil && r.Context().Err() != nil {
		return // the client left before the check: nothing was asked of the model
	}
	if err != nil {
		p.warn(r.Context(), "llmproxy: token budget unavailable, refusing requests", "tenant", tenant, "err", err)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "token budget unavailable: retry later", http.StatusServiceUnavailable)
		return
	}
	if v.Limited {
		ratelimitheader.Set(w.Header(), ratelimitheader.ForDecision("tokens", v.Window, v.Decision))
	}
	if !v.Allowed {
		http.Error(w, "token budget spent: retry later", http.StatusTooManyRequests)
		return
	}
	if r.Context().Err() != nil {
		return // the client left before the model was asked
	}
	resp, err := p.forward(r, req.Body)
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
	used := p.answer(w, resp, req, tenant)
	// The tokens are spent whether or not the client read the answer:
	// forward asked the model on a context the client's leaving does not
	// cancel, and answer read the answer to its end (a stream to its usage
	// chunk) even after a write to the client failed.
	if err := p.Budget.Charge(context.WithoutCancel(r.Context()), tenant, req.Model, used); err != nil {
		p.warn(r.Context(), "llmproxy: charge failed", "tenant", tenant, "tokens", used.Total, "err", err)
	}
}

// answer passes the upstream's answer to w and returns the tokens it used.
func (p *Proxy) answer(w http.ResponseWriter, resp *http.Response, req request, tenant string) Usage {
	if req.Stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		s, err := relay(w, resp.Body, !req.AskedUsage)
		if s.Reported {
			return s.Usage
		}
		// The model's stream was cut short or came without its usage:
		// charge an estimate rather than nothing, about a token a chunk
		// of output and a token per four bytes of the request's body.
		u := Usage{Input: int64(len(req.Body)+3) / 4, Output: s.Chunks}
		u.Total = u.Input + u.Output
		p.warn(context.Background(), "llmproxy: stream ended without usage, charging an estimate", "tenant", tenant, "chunks", s.Chunks, "tokens", u.Total, "err", err)
		return u
	}
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err == nil && len(out) > maxBody {
		err = errors.New("answer over 8 MiB")
	}
	w.Write(out)
	if err != nil {
		p.warn(context.Background(), "llmproxy: answer unreadable", "tenant", tenant, "err", err)
	}
	u, _ := usage(out)
	return u
}

// forward sends r with body to the upstream, on a context the client's
// leaving does not cancel: the model spends the tokens of an answer it has
// begun whether or not the client waits for it, so the proxy reads the
// answer to learn them (Client's Timeout bounds the wait).
func (p *Proxy) forward(r *http.Request, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, p.Upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = r.Header.Clone()
	req.Header.Del("X-Tenant")
	req.Header.Del("Content-Length")
	return p.Client.Do(req)
}

// warn logs msg at most once every ten seconds.
func (p *Proxy) warn(ctx context.Context, msg string, args ...any) {
	if p.logs != nil {
		if d, _ := p.logs.Allow(ctx, msg); !d.Allowed {
			return
		}
	}
	logger := p.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.Warn(msg, args...)
}

// New returns a Proxy; the zero Proxy's logs are not rate-limited.
func New(budget *Budget, upstream string, client *http.Client, logger *slog.Logger) *Proxy {
	logs, err := floodgate.New(floodgate.Limit{Limit: 1, Window: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	return &Proxy{Budget: budget, Upstream: upstream, Client: client, Logger: logger, logs: logs}
}
