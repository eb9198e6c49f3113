package httprules_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/floodgate-dev/floodgate/gateway"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/rules/httprules"
)

// The rule middleware in front of the gateway, as floodgate serve runs
// them: rules match the gateway's canonical paths and their names reach
// the RateLimit headers of the forwarded answers.

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
	gw, err := gateway.New(gateway.Options{Limit: mw, Routes: []gateway.Route{
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
