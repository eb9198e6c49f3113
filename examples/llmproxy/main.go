// Command llmproxy is an example: a proxy in front of an OpenAI-compatible
// API that holds each tenant to a token budget kept by a central Floodgate
// server. The cost of a request (the tokens the model used) is known only
// after the response, so the proxy checks the budget before forwarding and
// charges the tokens after:
//
//	floodgate serve --config floodgate.yaml   # rules: budget.yaml
//	go run ./examples/llmproxy -floodgate 127.0.0.1:8081 -upstream https://api.example.com
//
// with a rule that charges after the response:
//
//	domain: llm
//	rules:
//	  - name: tokens-per-tenant
//	    match: {tenant: "*"}
//	    count_by: [tenant]
//	    limit: 100000
//	    window: 1m
//	    charge_after_response: true
//
// A tenant that spends past its budget is in debt: its requests are
// rejected with 429 until the tokens that took it over have left the
// window, so it overspends by at most the responses it had in flight.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/rlsclient"
)

// maxBody bounds the bodies the proxy reads.
const maxBody = 8 << 20

func main() {
	listen := flag.String("listen", "127.0.0.1:8090", "address to serve on")
	upstream := flag.String("upstream", "", "base URL of the OpenAI-compatible API")
	server := flag.String("floodgate", "127.0.0.1:8081", "gRPC address of floodgate serve")
	domain := flag.String("domain", "llm", "rule domain of the budget")
	flag.Parse()
	if *upstream == "" {
		log.Fatal("llmproxy: -upstream is required")
	}
	budget, err := rlsclient.New(*server, rlsclient.Options{Domain: *domain, EntryKey: "tenant", FailClosed: true})
	if err != nil {
		log.Fatal(err)
	}
	defer budget.Close()
	p := &Proxy{Budget: budget, Upstream: strings.TrimRight(*upstream, "/"), Client: &http.Client{Timeout: 5 * time.Minute}}
	srv := &http.Server{Addr: *listen, Handler: p, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// Budget is what the proxy needs of the Floodgate client.
type Budget interface {
	Check(ctx context.Context, key string) (rlsclient.Decision, error)
	Charge(ctx context.Context, key string, n int64) (rlsclient.Decision, error)
}

// Proxy forwards requests to Upstream within each tenant's token budget.
// The tenant is the X-Tenant header.
type Proxy struct {
	Budget   Budget
	Upstream string
	Client   *http.Client
	Logger   *slog.Logger
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tenant := r.Header.Get("X-Tenant")
	if tenant == "" {
		http.Error(w, "missing X-Tenant header", http.StatusBadRequest)
		return
	}
	d, err := p.Budget.Check(r.Context(), tenant)
	if err != nil {
		http.Error(w, "budget check failed", http.StatusServiceUnavailable)
		return
	}
	httplimit.SetDecisionHeaders(w.Header(), "tokens", time.Minute, d)
	if !d.Allowed {
		http.Error(w, "token budget spent: retry later", http.StatusTooManyRequests)
		return
	}
	status, body, header, err := p.forward(r)
	if err != nil {
		http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	for k, vs := range header {
		if k != "Content-Length" {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(status)
	w.Write(body)
	// The tokens are spent whether or not the client read the answer.
	if used := usage(body); used > 0 {
		if _, err := p.Budget.Charge(context.WithoutCancel(r.Context()), tenant, used); err != nil {
			p.logger().Warn("llmproxy: charge failed", "tenant", tenant, "tokens", used, "err", err)
		}
	}
}

// forward sends r to the upstream and reads the whole answer.
func (p *Proxy) forward(r *http.Request) (int, []byte, http.Header, error) {
	in, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return 0, nil, nil, err
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.Upstream+r.URL.RequestURI(), bytes.NewReader(in))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header = r.Header.Clone()
	req.Header.Del("X-Tenant")
	resp, err := p.Client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err == nil && len(out) > maxBody {
		err = errors.New("answer too large")
	}
	return resp.StatusCode, out, resp.Header, err
}

// usage returns usage.total_tokens of an OpenAI-style answer, or 0.
func usage(body []byte) int64 {
	var v struct {
		Usage struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &v) != nil {
		return 0
	}
	return v.Usage.TotalTokens
}

func (p *Proxy) logger() *slog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return slog.Default()
}
