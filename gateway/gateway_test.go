package gateway

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/rules/httprules"
)

func backend(t *testing.T, name string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
		w.Header().Set("X-Seen-Path", r.URL.Path)
		w.Header().Set("X-Seen-XFF", r.Header.Get("X-Forwarded-For"))
		io.WriteString(w, name)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func mustURL(t testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestGatewayRoutesAndLimits(t *testing.T) {
	loan, catalog := backend(t, "loan"), backend(t, "catalog")
	set, err := rules.Parse("gw.yaml", []byte(`
domain: gateway
rules:
  - name: loan-prefix
    match: {path: {prefix: /loan/}}
    count_by: global
    limit: 2
    window: 1h
    algorithm: fixed-window
`))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httprules.Middleware(httprules.Options{Checker: rules.NewEngine(set, memstore.New(memstore.Options{})),
		Sources: []httprules.Source{httprules.IP(nil), httprules.Path(), httprules.Method()}})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(Options{Limit: mw, Routes: []Route{
		{Prefix: "/loan", Upstream: mustURL(t, loan.URL)},
		{Prefix: "/catalog/", Upstream: mustURL(t, catalog.URL+"/v2")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	defer srv.Close()

	get := func(path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("X-Forwarded-For", "6.6.6.6") // spoofed; the gateway must not pass it on as is
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for i := 0; i < 2; i++ {
		resp := get("/loan/list")
		if resp.StatusCode != 200 || resp.Header.Get("X-Backend") != "loan" {
			t.Fatalf("/loan/list %d: %d from %q", i, resp.StatusCode, resp.Header.Get("X-Backend"))
		}
		if resp.Header.Get("RateLimit-Policy") != `"loan-prefix";q=2;w=3600` {
			t.Fatalf("RateLimit-Policy %q", resp.Header.Get("RateLimit-Policy"))
		}
		if xff := resp.Header.Get("X-Seen-XFF"); net.ParseIP(xff) == nil || xff == "6.6.6.6" {
			t.Fatalf("upstream saw X-Forwarded-For %q, want the gateway's view of the client", xff)
		}
	}
	if resp := get("/loan/borrow"); resp.StatusCode != 429 {
		t.Fatalf("3rd /loan/ request: %d, want 429", resp.StatusCode)
	}
	// /loan-bulk/list routes to the loan service but is outside the rule's
	// prefix: not limited (the gateway example's gap).
	if resp := get("/loan-bulk/list"); resp.StatusCode != 200 || resp.Header.Get("X-Backend") != "loan" {
		t.Fatalf("/loan-bulk/list: %d from %q", resp.StatusCode, resp.Header.Get("X-Backend"))
	}
	resp := get("/catalog/search")
	if resp.StatusCode != 200 || resp.Header.Get("X-Backend") != "catalog" || resp.Header.Get("X-Seen-Path") != "/v2/catalog/search" {
		t.Fatalf("/catalog/search: %d from %q path %q", resp.StatusCode, resp.Header.Get("X-Backend"), resp.Header.Get("X-Seen-Path"))
	}
	if resp := get("/other"); resp.StatusCode != 404 {
		t.Fatalf("unrouted path: %d, want 404", resp.StatusCode)
	}
}

func TestGatewayUpstreamDown(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	addr := dead.URL
	dead.Close()
	gw, err := New(Options{Routes: []Route{{Prefix: "/", Upstream: mustURL(t, addr)}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	gw.ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
	if rec.Code != http.StatusBadGateway {
		t.Fatalf("dead upstream: %d, want 502", rec.Code)
	}
}

func TestGatewayBadRoutes(t *testing.T) {
	u := mustURL(t, "http://127.0.0.1:1")
	for _, rs := range [][]Route{
		nil,
		{{Prefix: "x", Upstream: u}},
		{{Prefix: "/", Upstream: mustURL(t, "ftp://h")}},
		{{Prefix: "/", Upstream: u}, {Prefix: "/", Upstream: u}},
	} {
		t.Run(fmt.Sprint(rs), func(t *testing.T) {
			if _, err := New(Options{Routes: rs}); err == nil {
				t.Errorf("routes %v accepted", rs)
			}
		})
	}
}

func TestGatewayForwardsChainOnlyFromTrustedProxies(t *testing.T) {
	up := backend(t, "up")
	for _, c := range []struct {
		trust string
		want  string
	}{
		{"", "127.0.0.1"},                          // untrusted peer: its header is dropped
		{"127.0.0.0/8", "198.51.100.7, 127.0.0.1"}, // trusted peer: chain kept, peer appended
	} {
		t.Run("trust "+c.trust, func(t *testing.T) {
			var p *httplimit.Proxies
			if c.trust != "" {
				p, _ = httplimit.ParseProxies(c.trust)
			}
			gw, err := New(Options{Proxies: p, Routes: []Route{{Prefix: "/", Upstream: mustURL(t, up.URL)}}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(gw)
			req, _ := http.NewRequest("GET", srv.URL+"/x", nil)
			req.Header.Set("X-Forwarded-For", "198.51.100.7")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			srv.Close()
			if got := resp.Header.Get("X-Seen-XFF"); got != c.want {
				t.Errorf("trust %q: upstream saw X-Forwarded-For %q, want %q", c.trust, got, c.want)
			}
		})
	}
}
