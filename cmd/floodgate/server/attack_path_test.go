package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/nginxtest"
)

// rawGet sends target as the request line's target, byte for byte (Go's
// client would re-escape it), and returns the status and body.
func rawGet(t *testing.T, addr, target string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET "+target+" HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// nginxPages is an upstream with a login page and an admin section; nginx
// merges slashes, removes dot segments and decodes %2e before it matches a
// location, as most web servers do. It also serves the login page for the
// spellings upstreams that normalise further read as /api/login: trailing
// dots and spaces (Windows and IIS drop them), a path decoded twice
// (/api/%256cogin is /api/%6cogin once decoded, /api/login twice) and
// full-width letters (NFKC makes ｌｏｇｉｎ login).
const nginxPages = `
		location = /api/login { return 200 "login page\n"; }
		location ~ "^/api/login[. ]+$" { return 200 "login page\n"; }
		location = "/api/%6cogin" { return 200 "login page\n"; }
		location = "/api/ｌｏｇｉｎ" { return 200 "login page\n"; }
		location /api/admin/ { return 200 "admin page\n"; }
		location / { return 404 "no such page\n"; }`

const pathRules = `
domain: gw
rules:
  - name: login
    match: {path: /api/login}
    count_by: [ip]
    limit: 1
    window: 1h
    algorithm: fixed-window
  - name: admin
    match: {path: {prefix: /api/admin/}}
    count_by: [ip]
    limit: 1
    window: 1h
    algorithm: fixed-window
`

// startPathGateway runs a server whose gateway sends every path to a real
// nginx serving nginxPages, under pathRules and the route's path policy,
// and returns the gateway's address and nginx's.
func startPathGateway(t *testing.T, policy RoutePath) (gw, nginx string) {
	t.Helper()
	up := nginxtest.Start(t, nginxPages)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(pathRules), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Rules = rulesFile
	cfg.Gateway.Routes = []Route{{Prefix: "/", Upstream: "http://" + up, Path: policy}}
	r := start(t, cfg)
	return r.srv.Addr(ListenerGateway), up
}

// TestGatewayPathSpellingsCannotPassTheLimit: once /api/login and
// /api/admin/x have had their one request, no other spelling of them
// reaches nginx's page. Those nginx reads as the same page are limited as
// it (429); those the default policy refuses (';', %2F, a backslash, a
// control character, a trailing dot or space, a double-encoded escape, a
// full-width letter: nginx serves the login page for the last three, as
// upstreams that normalise them would) are 400; those nginx serves as
// other pages (another case, a trailing slash) reach those pages, as they
// would without the gateway.
func TestGatewayPathSpellingsCannotPassTheLimit(t *testing.T) {
	gw, nginx := startPathGateway(t, RoutePath{})
	// nginx itself, asked directly, serves the login page for the
	// spellings upstreams that normalise read as /api/login.
	for _, target := range []string{"/api/login.", "/api/login%20", "/api/%256cogin", "/api/%EF%BD%8C%EF%BD%8F%EF%BD%87%EF%BD%89%EF%BD%8E"} {
		if code, body := rawGet(t, nginx, target); code != 200 || body != "login page\n" {
			t.Fatalf("nginx asked %s directly: %d %q, want its login page", target, code, body)
		}
	}
	for _, target := range []string{"/api/login", "/api/admin/x"} {
		if code, body := rawGet(t, gw, target); code != 200 || !strings.Contains(body, "page") {
			t.Fatalf("first %s: %d %q, want nginx's page", target, code, body)
		}
		if code, _ := rawGet(t, gw, target); code != http.StatusTooManyRequests {
			t.Fatalf("second %s: %d, want 429", target, code)
		}
	}
	for _, c := range []struct {
		target string
		want   int
	}{
		{"//api/login", 429},
		{"/api//login", 429},
		{"/api/./login", 429},
		{"/./api/login", 429},
		{"/api/%2e/login", 429},
		{"/api/%2E%2E/api/login", 429},
		{"/api/foo/../login", 429},
		{"/api/foo/%2e%2e/login", 429},
		{"/../api/login", 429},
		{"/%61pi/login", 429},
		{"/api/login?x=1", 429},
		{"http://gw/api/./login", 429},
		{"/api//admin/x", 429},
		{"/api/./admin/x", 429},
		{"/api/admin//x", 429},
		{"/api/admin/y/../x", 429},
		{"/api/x/../admin/x", 429},
		{"/api/login;x", 400},
		{"/api/..;/login", 400},
		{"/api/login%3bx", 400},
		{"/api%2Flogin", 400},
		{"/api/admin%2Fx", 400},
		{"/api\\login", 400},
		{"/api%5clogin", 400},
		{"/api/login%00", 400},
		{"/api/login%zz", 400},
		{"/api/login.", 400}, // trailing dots and spaces, which IIS drops
		{"/api/login%2e", 400},
		{"/api/login..", 400},
		{"/api/login%20", 400},
		{"/api/login.%20", 400},
		{"/api/%256cogin", 400}, // double encoding, for upstreams that decode twice
		{"/api/%25%36%63ogin", 400},
		{"/api/%EF%BD%8C%EF%BD%8F%EF%BD%87%EF%BD%89%EF%BD%8E", 400}, // full-width, which NFKC makes login
		{"/api/\xef\xbd\x8c\xef\xbd\x8f\xef\xbd\x87\xef\xbd\x89\xef\xbd\x8e", 400},
		{"/API/login", 404},   // nginx's own 404: case matters to nginx
		{"/api/login/", 404},  // and so does the trailing slash
		{"/API/admin/x", 404}, // not under /api/admin/ for nginx either
	} {
		t.Run(c.target, func(t *testing.T) {
			code, body := rawGet(t, gw, c.target)
			if code != c.want || strings.Contains(body, "page\n") && !strings.Contains(body, "no such page") {
				t.Errorf("GET %s: %d %q, want %d and not nginx's page", c.target, code, body, c.want)
			}
		})
	}
}

// TestGatewayPathPolicyForLooserUpstreams: a route whose upstream ignores
// case, trailing slashes and ;parameters says so, and then /API/Login,
// /api/login/ and /api/login;jsessionid=1 are limited as /api/login, and
// the upstream is sent the path the limiter counted.
func TestGatewayPathPolicyForLooserUpstreams(t *testing.T) {
	gw, _ := startPathGateway(t, RoutePath{Case: "lower", TrailingSlash: "strip", Semicolon: "strip"})
	// nginx only has /api/login: that the first request, spelled
	// otherwise, gets the login page shows the gateway forwarded the
	// canonical path.
	if code, body := rawGet(t, gw, "/API/Login/;jsessionid=1"); code != 200 || body != "login page\n" {
		t.Fatalf("first /API/Login/;jsessionid=1: %d %q, want nginx's login page", code, body)
	}
	for _, target := range []string{"/api/login", "/API/login", "/api/login/", "/api/login;x", "/Api/..;/api/LOGIN/", "/API//ADMIN/../login"} {
		t.Run(target, func(t *testing.T) {
			if code, body := rawGet(t, gw, target); code != http.StatusTooManyRequests {
				t.Errorf("GET %s: %d %q, want 429", target, code, body)
			}
		})
	}
}
