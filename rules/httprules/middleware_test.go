package httprules

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/rules/rulelog"
)

// newEngine builds a real rule engine over a fresh memory store.
func newEngine(t testing.TB, file string) *rules.Engine {
	t.Helper()
	set, err := rules.Parse("test.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	return rules.NewEngine(set, memstore.New(memstore.Options{}))
}

func newServer(t *testing.T, o Options, h http.Handler) *httptest.Server {
	t.Helper()
	mw, err := Middleware(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(h)) // listens on 127.0.0.1
	t.Cleanup(srv.Close)
	return srv
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

func get(t *testing.T, url string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

const perIP = `
domain: web
rules:
  - name: per-ip
    match: {ip: "*"}
    count_by: [ip]
    limit: 3
    window: 1m
    algorithm: fixed-window
`

func TestMiddlewareRejectsWithHeadersAndBody(t *testing.T) {
	var served atomic.Int32
	srv := newServer(t, Options{Checker: newEngine(t, perIP)}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
	}))
	for i := 0; i < 3; i++ {
		resp := get(t, srv.URL+"/x")
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d, want 200", i, resp.StatusCode)
		}
		h := resp.Header
		if h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != itoa(2-i) {
			t.Errorf("request %d: X-RateLimit-Limit %q Remaining %q", i, h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"))
		}
		if reset := h.Get("X-RateLimit-Reset"); reset == "" || len(reset) > 2 {
			t.Errorf("X-RateLimit-Reset %q should be delta-seconds within the 60 s window", reset)
		}
		if got := h.Get("RateLimit-Policy"); got != `"per-ip";q=3;w=60` {
			t.Errorf("RateLimit-Policy %q", got)
		}
		if got := h.Get("RateLimit"); !strings.HasPrefix(got, `"per-ip";r=`+itoa(2-i)+";t=") {
			t.Errorf("RateLimit %q", got)
		}
		if h.Get("Retry-After") != "" {
			t.Errorf("Retry-After on an allowed response")
		}
	}
	resp := get(t, srv.URL+"/x")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("4th request: status %d, want 429", resp.StatusCode)
	}
	if served.Load() != 3 {
		t.Fatalf("handler ran %d times, want 3", served.Load())
	}
	ra := resp.Header.Get("Retry-After")
	if ra == "" || ra == "0" {
		t.Fatalf("Retry-After %q on 429", ra)
	}
	if resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("429 content type %q", resp.Header.Get("Content-Type"))
	}
	var body httplimit.Rejection
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Rule != "per-ip" || body.Limit != 3 || body.Window != "1m" || body.WindowSeconds != 60 ||
		body.Remaining != 0 || itoa(int(body.RetryAfter)) != ra || len(body.Rules) != 1 ||
		body.Type != httplimit.ProblemQuotaExceeded || len(body.ViolatedPolicies) != 1 || body.ViolatedPolicies[0] != "per-ip" {
		t.Fatalf("429 body %+v (Retry-After %s)", body, ra)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestSpoofedForwardedForIsIgnored(t *testing.T) {
	// The test client connects from 127.0.0.1, which is not trusted here:
	// every request counts against 127.0.0.1 whatever X-Forwarded-For says.
	p, _ := httplimit.ParseProxies("10.0.0.0/8")
	srv := newServer(t, Options{Checker: newEngine(t, perIP), Proxies: p}, ok)
	codes := ""
	for i := 0; i < 4; i++ {
		resp := get(t, srv.URL, "X-Forwarded-For", "198.51.100."+itoa(i), "Forwarded", "for=192.0.2."+itoa(i))
		codes += itoa(resp.StatusCode) + " "
	}
	if codes != "200 200 200 429 " {
		t.Fatalf("untrusted peer with rotating spoofed headers: %s, want the 4th rejected", codes)
	}

	// When the peer is a trusted proxy, the header names the client, and
	// different clients get different buckets.
	p, _ = httplimit.ParseProxies("127.0.0.0/8", "::1")
	srv = newServer(t, Options{Checker: newEngine(t, perIP), Proxies: p}, ok)
	for i := 0; i < 4; i++ {
		if resp := get(t, srv.URL, "X-Forwarded-For", "198.51.100."+itoa(i)); resp.StatusCode != 200 {
			t.Fatalf("trusted proxy, client %d: status %d", i, resp.StatusCode)
		}
	}
	for i := 0; i < 3; i++ {
		get(t, srv.URL, "X-Forwarded-For", "203.0.113.5")
	}
	if resp := get(t, srv.URL, "X-Forwarded-For", "203.0.113.5"); resp.StatusCode != 429 {
		t.Fatalf("4th request of one forwarded client: status %d, want 429", resp.StatusCode)
	}
}

func TestHeaderAndPathSources(t *testing.T) {
	eng := newEngine(t, `
domain: api
rules:
  - name: per-key
    match: {"header:x-api-key": "*", path: {prefix: /loan/}}
    count_by: ["header:x-api-key"]
    limit: 1
    window: 1h
`)
	srv := newServer(t, Options{Checker: eng, Sources: []Source{Header("X-API-Key"), Path(), Method()}}, ok)
	if get(t, srv.URL+"/loan/list", "X-API-Key", "k1").StatusCode != 200 {
		t.Fatal("first k1 request rejected")
	}
	if get(t, srv.URL+"/loan/list", "X-API-Key", "k1").StatusCode != 429 {
		t.Fatal("second k1 request allowed")
	}
	if get(t, srv.URL+"/loan/list", "X-API-Key", "k2").StatusCode != 200 {
		t.Fatal("k2 shares k1's bucket")
	}
	if get(t, srv.URL+"/catalog/search", "X-API-Key", "k1").StatusCode != 200 {
		t.Fatal("a path outside the rule's prefix was limited")
	}
	resp := get(t, srv.URL+"/loan/list")
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != "" {
		t.Fatalf("request without the key: status %d, policy %q", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
}

func TestShadowNeverRejectsAndIsLogged(t *testing.T) {
	eng := newEngine(t, `
domain: web
rules:
  - name: dark
    match: {ip: "*"}
    count_by: [ip]
    limit: 1
    window: 1m
    shadow: true
`)
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	srv := newServer(t, Options{Checker: eng, Logger: log, ShadowLog: rulelog.NewShadow(log, 0)}, ok)
	for i := 0; i < 3; i++ {
		resp := get(t, srv.URL)
		if resp.StatusCode != 200 {
			t.Fatalf("shadow rule rejected request %d", i)
		}
		if resp.Header.Get("RateLimit-Policy") != "" || resp.Header.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("shadow rule advertised in headers: %v", resp.Header)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "shadow rule would reject"); n != 2 {
		t.Fatalf("logged %d shadow rejections, want 2:\n%s", n, logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

const oneInFlight = `
domain: web
rules:
  - name: one-at-a-time
    match: {ip: "*"}
    count_by: [ip]
    limit: 1
    algorithm: concurrency
`

// TestConcurrencyReleased checks that the slot is held while the handler
// runs and given back when it returns, when it panics, and when the client
// goes away.
func TestConcurrencyReleased(t *testing.T) {
	eng := newEngine(t, oneInFlight)
	entered := make(chan struct{}, 1)
	proceed := make(chan struct{})
	done := make(chan struct{}, 1)
	var mode atomic.Value
	mode.Store("return")
	mw, err := Middleware(Options{Checker: eng, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/probe" {
			return
		}
		defer func() { done <- struct{}{} }()
		entered <- struct{}{}
		switch mode.Load() {
		case "return":
			<-proceed
		case "panic":
			<-proceed
			panic(http.ErrAbortHandler) // net/http recovers it silently
		case "cancel":
			<-r.Context().Done()
		}
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	for _, m := range []string{"return", "panic", "cancel"} {
		mode.Store(m)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			// POST: the client does not retry it when the panicking
			// handler's connection is closed.
			req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/work", nil)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			errc <- err
		}()
		<-entered
		// The slot is taken: another request is rejected.
		if code := get(t, srv.URL+"/probe").StatusCode; code != 429 {
			t.Fatalf("%s: second request while one is in flight: %d, want 429", m, code)
		}
		if m == "cancel" {
			cancel()
		} else {
			proceed <- struct{}{}
		}
		<-done
		<-errc
		cancel()
		// The release runs in the middleware's deferred call, after the
		// handler; wait for it without assuming its timing.
		deadline := time.Now().Add(5 * time.Second)
		for {
			code := get(t, srv.URL+"/probe").StatusCode
			if code == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: slot never released (status %d)", m, code)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestLeakyBucketDelaysInsteadOfRejecting runs the middleware in a
// synctest bubble, where time moves only while every goroutine waits: the
// delays are measured exactly, whatever the machine's load.
func TestLeakyBucketDelaysInsteadOfRejecting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newEngine(t, `
domain: web
rules:
  - name: paced
    match: {ip: "*"}
    count_by: [ip]
    limit: 5
    window: 1s
    algorithm: leaky-bucket
    max_delay: 2s
`)
		var served atomic.Int32
		mw, err := Middleware(Options{Checker: eng})
		if err != nil {
			t.Fatal(err)
		}
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }))
		start := time.Now()
		for i := 0; i < 3; i++ {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			if rec.Code != 200 {
				t.Fatalf("request %d: status %d; a leaky bucket under its bound delays, it does not reject", i, rec.Code)
			}
		}
		// Three requests at 5/s leave 200 ms apart: the third waits 400 ms.
		if el := time.Since(start); el < 400*time.Millisecond || el > 410*time.Millisecond {
			t.Fatalf("three paced requests took %v, want them spaced 200 ms apart (400 ms)", el)
		}
		// A client that gives up while queued never reaches the handler.
		before := served.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		time.Sleep(600 * time.Millisecond) // longer than its delay would have been
		synctest.Wait()
		if served.Load() != before {
			t.Fatalf("handler ran for a request whose client had gone (status %d)", rec.Code)
		}
	})
}

func TestCheckErrorFailsOpenOrClosed(t *testing.T) {
	eng := newEngine(t, perIP)
	// An entry key past the engine's bounds: Check errs.
	bad := Func(strings.Repeat("k", rules.Max().KeyLen+1), func(*http.Request) (string, bool) { return "v", true })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := newServer(t, Options{Checker: eng, Sources: []Source{bad}, Logger: quiet}, ok)
	if code := get(t, open.URL).StatusCode; code != 200 {
		t.Fatalf("fail-open: status %d, want 200", code)
	}
	closed := newServer(t, Options{Checker: eng, Sources: []Source{bad}, FailClosed: true, Logger: quiet}, ok)
	if code := get(t, closed.URL).StatusCode; code != 503 {
		t.Fatalf("fail-closed: status %d, want 503", code)
	}
}

func TestMiddlewareNeedsChecker(t *testing.T) {
	if _, err := Middleware(Options{}); err == nil {
		t.Fatal("Middleware without a Checker succeeded")
	}
}
