package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// seenPath is an upstream that answers with the escaped path it was sent.
func seenPath(t *testing.T, name string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(name + " " + r.URL.EscapedPath()))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestGatewayForwardsTheCanonicalPath: the limiter sees, and the upstream
// is sent, one spelling; the direct forwarder and httputil.ReverseProxy (a
// request with a body) alike. Routes with different path policies each
// apply their own; a path one route's policy refuses is 400, one that
// would take another route once spelled canonically is 400.
func TestGatewayForwardsTheCanonicalPath(t *testing.T) {
	api, files, rest := seenPath(t, "api"), seenPath(t, "files"), seenPath(t, "rest")
	var limited []string
	limit := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			limited = append(limited, r.URL.Path)
			next.ServeHTTP(w, r)
		})
	}
	gw, err := New(Options{Limit: limit, Routes: []Route{
		{Prefix: "/api/", Upstream: mustURL(t, api.URL)},
		{Prefix: "/files/", Upstream: mustURL(t, files.URL), Path: PathPolicy{EncodedSlash: "decode", Semicolon: "keep", Compatibility: "keep"}},
		{Prefix: "/", Upstream: mustURL(t, rest.URL), Path: PathPolicy{Case: "lower", Semicolon: "strip", TrailingSlash: "strip"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		target  string
		code    int
		answer  string
		limited string
	}{
		{"/api/login", 200, "api /api/login", "/api/login"},
		{"//api/./x/../login", 200, "api /api/login", "/api/login"},
		{"/api/%7euser/a%20b", 200, "api /api/~user/a%20b", "/api/~user/a b"},
		{"/api/login;x", 400, "';'", ""},
		{"/api/a%2Fb", 400, "%2F", ""},
		{"/files/a%2Fb;v=1", 200, "files /files/a/b;v=1", "/files/a/b;v=1"},
		{"/files%2F..%2Ffiles/x", 200, "files /files/x", "/files/x"},
		{"/Other/Page/;jsessionid=1", 200, "rest /other/page", "/other/page"},
		{"/API/login", 400, "takes route / under that route's path policy, but route /api/ as spelled", ""},
		{"/x/..;/api/y", 400, "route /api/", ""},
		{"/x\\y", 400, "backslash", ""},
		{"/api/login.", 400, "ends with a dot or a space", ""},
		{"/api/%256cogin", 400, "double-encoded", ""},
		{"/api/%EF%BD%8Cogin", 400, "NFKC", ""},
		{"/files/%EF%BD%8Cogin", 200, "files /files/%EF%BD%8Cogin", "/files/ｌogin"},
	} {
		for _, method := range []string{"GET", "POST"} {
			t.Run(method+" "+c.target, func(t *testing.T) {
				limited = nil
				req := httptest.NewRequest(method, "http://gw"+c.target, nil)
				if method == "POST" { // a body: through httputil.ReverseProxy
					req = httptest.NewRequest(method, "http://gw"+c.target, strings.NewReader("body"))
				}
				rec := httptest.NewRecorder()
				gw.ServeHTTP(rec, req)
				got := rec.Body.String()
				if !strings.Contains(got, c.answer) || rec.Code != c.code {
					t.Fatalf("%s %s: %d %q, want %d with %q", method, c.target, rec.Code, got, c.code, c.answer)
				}
				if c.limited == "" && len(limited) != 0 || c.limited != "" && (len(limited) != 1 || limited[0] != c.limited) {
					t.Fatalf("%s %s: the limiter saw %q, want %q", method, c.target, limited, c.limited)
				}
			})
		}
	}
}

// TestGatewayRefusesConnect: CONNECT has no path to limit or forward.
func TestGatewayRefusesConnect(t *testing.T) {
	gw, err := New(Options{Routes: []Route{{Prefix: "/", Upstream: mustURL(t, seenPath(t, "up").URL)}}})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodConnect, "/", nil)
	req.URL.Path, req.Host = "", "example.com:443"
	rec := httptest.NewRecorder()
	gw.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed || !strings.Contains(rec.Body.String(), "CONNECT") {
		t.Fatalf("CONNECT: %d %q, want 405", rec.Code, rec.Body)
	}
}

func TestGatewayRoutePathPolicyChecked(t *testing.T) {
	up := mustURL(t, "http://127.0.0.1:9")
	for _, c := range []struct {
		r    Route
		want string
	}{
		{Route{Prefix: "/api/", Upstream: up, Path: PathPolicy{Case: "upper"}}, `case "upper"`},
		{Route{Prefix: "/API/", Upstream: up, Path: PathPolicy{Case: "lower"}}, "not a canonical path"},
		{Route{Prefix: "/api/../x/", Upstream: up}, "not a canonical path"},
		{Route{Prefix: "//api/", Upstream: up}, "not a canonical path"},
	} {
		t.Run(c.want, func(t *testing.T) {
			if _, err := New(Options{Routes: []Route{c.r}}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("route %+v: %v, want an error naming %s", c.r, err, c.want)
			}
		})
	}
	if _, err := New(Options{Routes: []Route{{Prefix: "/api/", Upstream: up, Path: PathPolicy{TrailingSlash: "strip"}}}}); err != nil {
		t.Errorf("prefix /api/ with trailing_slash strip: %v", err)
	}
}
