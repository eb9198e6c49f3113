package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/httplimit"
)

// Protecting a handler with a Limiter, keyed by client address.
func ExampleLimitBy() {
	lim, _ := floodgate.New(floodgate.Limit{Limit: 2, Window: time.Minute})
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	srv := httptest.NewServer(httplimit.LimitBy(lim, httplimit.KeyByIP(nil))(hello))
	defer srv.Close()

	for range 3 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), resp.Header.Get("RateLimit-Policy"))
	}
	// Output:
	// 200 1 "limit";q=2;w=60
	// 200 0 "limit";q=2;w=60
	// 429 0 "limit";q=2;w=60
}

func get(t *testing.T, url string, hdr map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestLimitByHeaderOverRealListener(t *testing.T) {
	lim, err := floodgate.New(floodgate.Limit{Limit: 3, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var ran int
	h := httplimit.LimitBy(lim, httplimit.KeyByHeader("X-API-Key"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ }))
	srv := httptest.NewServer(h)
	defer srv.Close()
	for i := range 4 {
		resp := get(t, srv.URL, map[string]string{"X-API-Key": "acme"})
		want := http.StatusOK
		if i == 3 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
		}
		if i == 3 && resp.Header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	if resp := get(t, srv.URL, map[string]string{"X-API-Key": "globex"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("another key: %d, want 200 (keys count apart)", resp.StatusCode)
	}
	if resp := get(t, srv.URL, nil); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("no key header: %d, want 400", resp.StatusCode)
	}
	if ran != 4 {
		t.Fatalf("handler ran %d times, want 4", ran)
	}
}

func TestLimitByTrustedProxy(t *testing.T) {
	lim, _ := floodgate.New(floodgate.Limit{Limit: 1, Window: time.Minute})
	proxies, _ := httplimit.ParseProxies("127.0.0.0/8", "::1/128")
	srv := httptest.NewServer(httplimit.LimitBy(lim, httplimit.KeyByIP(proxies))(http.NotFoundHandler()))
	defer srv.Close()
	for _, c := range []struct {
		xff  string
		want int
	}{{"203.0.113.1", 404}, {"203.0.113.2", 404}, {"203.0.113.1", 429}} {
		if resp := get(t, srv.URL, map[string]string{"X-Forwarded-For": c.xff}); resp.StatusCode != c.want {
			t.Fatalf("client %s: %d, want %d", c.xff, resp.StatusCode, c.want)
		}
	}
}

// A concurrency limiter gets its unit back when the handler returns.
func TestLimitByConcurrencyReleases(t *testing.T) {
	lim, _ := floodgate.New(floodgate.Limit{Algorithm: algorithm.Concurrency, Limit: 1})
	block := make(chan struct{})
	entered := make(chan struct{})
	srv := httptest.NewServer(httplimit.LimitBy(lim, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-block
		}
	})))
	defer srv.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		get(t, srv.URL+"/slow", nil)
	}()
	<-entered
	if resp := get(t, srv.URL, nil); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second request while one is in flight: %d, want 429", resp.StatusCode)
	}
	close(block)
	<-done
	if resp := get(t, srv.URL, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the first ended: %d, want 200", resp.StatusCode)
	}
}

type failing struct{}

func (failing) Allow(context.Context, string) (algorithm.Decision, error) {
	return algorithm.Decision{}, errors.New("store down")
}

func TestLimiterMiddlewareFailurePolicy(t *testing.T) {
	for _, closed := range []bool{false, true} {
		mw, err := httplimit.LimiterMiddleware(httplimit.LimiterOptions{Limiter: failing{}, FailClosed: closed})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mw(http.NotFoundHandler()))
		want := 404
		if closed {
			want = 503
		}
		resp := get(t, srv.URL, nil)
		if resp.StatusCode != want {
			t.Errorf("fail closed %v: %d, want %d", closed, resp.StatusCode, want)
		}
		if closed && resp.Header.Get("Retry-After") != "1" {
			t.Errorf("fail closed: Retry-After %q, want the default 1", resp.Header.Get("Retry-After"))
		}
		srv.Close()
	}
	if _, err := httplimit.LimiterMiddleware(httplimit.LimiterOptions{}); err == nil {
		t.Fatal("nil limiter accepted")
	}
	if _, err := httplimit.LimiterMiddleware(httplimit.LimiterOptions{Limiter: failing{}, FailRetryAfter: -time.Second}); err == nil {
		t.Fatal("negative FailRetryAfter accepted")
	}
}

// TestLimitByFailurePolicy holds LimitBy's failure policy option: by
// default (and with FailOpen) a request the limiter cannot decide reaches
// the handler; with FailClosed it gets 503, the Retry-After given (rounded
// up to seconds) and a JSON error, and the handler never runs.
func TestLimitByFailurePolicy(t *testing.T) {
	cases := []struct {
		name       string
		opts       []httplimit.Option
		code       int
		retryAfter string
	}{
		{"default", nil, http.StatusNoContent, ""},
		{"FailOpen", []httplimit.Option{httplimit.FailOpen()}, http.StatusNoContent, ""},
		{"FailClosed(0)", []httplimit.Option{httplimit.FailClosed(0)}, http.StatusServiceUnavailable, "1"},
		{"FailClosed(2.5s)", []httplimit.Option{httplimit.FailClosed(2500 * time.Millisecond)}, http.StatusServiceUnavailable, "3"},
		{"FailClosed then FailOpen", []httplimit.Option{httplimit.FailClosed(time.Minute), httplimit.FailOpen()}, http.StatusNoContent, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ran bool
			h := httplimit.LimitBy(failing{}, nil, c.opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ran = true
				w.WriteHeader(http.StatusNoContent)
			}))
			srv := httptest.NewServer(h)
			defer srv.Close()
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.code)
			}
			if got := resp.Header.Get("Retry-After"); got != c.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, c.retryAfter)
			}
			if ran != (c.code == http.StatusNoContent) {
				t.Errorf("handler ran: %v, with status %d", ran, resp.StatusCode)
			}
			if c.code == http.StatusServiceUnavailable && string(body) != `{"error":"rate limiter unavailable: store down"}`+"\n" {
				t.Errorf("503 body %q", body)
			}
		})
	}
}
