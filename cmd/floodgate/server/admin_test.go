package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/statuspage"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

const adminToken = "test-admin-token-0123456789"

// adminRules has an API key limit of 1, an unlimited override for one
// key, and a shadow rule that logs what it would reject.
const adminRules = `
domain: default
rules:
  - name: api-key
    match: {header:x-api-key: "*"}
    count_by: [header:x-api-key]
    limit: 1
    window: 1h
    algorithm: fixed-window
    overrides:
      - match: {header:x-api-key: sk_live_unlimited_vip}
        unlimited: true
  - name: session-shadow
    match: {session: "*"}
    count_by: [session, client]
    limit: 1
    window: 1h
    algorithm: fixed-window
    shadow: true
`

// get fetches url with the bearer token tok ("" for none).
func get(t *testing.T, url, tok string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func adminConfig(t *testing.T) Config {
	t.Helper()
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesFile, []byte(adminRules), 0o644)
	cfg := testConfig()
	cfg.Rules = rulesFile
	cfg.Pprof = true
	return cfg
}

// TestAdminToken: with a token from the environment, the admin endpoints
// answer 401 without it and 200 with it; /v1/check, /healthz and /readyz
// stay open. A wrong token is 401 too.
func TestAdminToken(t *testing.T) {
	t.Setenv("FG_TEST_ADMIN_TOKEN", adminToken)
	cfg := adminConfig(t)
	cfg.Admin.TokenEnv = "FG_TEST_ADMIN_TOKEN"
	r := start(t, cfg)
	for _, p := range []string{"/v1/rules", "/status.json", "/history.json", "/", "/status.js", "/metrics", "/debug/pprof/"} {
		if code, _ := get(t, r.url(p), ""); code != http.StatusUnauthorized {
			t.Errorf("%s without the token: %d, want 401", p, code)
		}
		if code, _ := get(t, r.url(p), "wrong-token-0123456789"); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d, want 401", p, code)
		}
		if code, body := get(t, r.url(p), adminToken); code != http.StatusOK {
			t.Errorf("%s with the token: %d %.200s", p, code, body)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _ := get(t, r.url(p), ""); code != http.StatusOK {
			t.Errorf("%s without the token: %d, want 200", p, code)
		}
	}
	resp, err := http.Post(r.url("/v1/check"), "application/json",
		strings.NewReader(`{"descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/v1/check without the token: %d, want 200", resp.StatusCode)
	}

	// A token too short, or token_file and token_env together, are refused.
	t.Setenv("FG_TEST_SHORT", "short")
	bad := adminConfig(t)
	bad.Admin.TokenEnv = "FG_TEST_SHORT"
	if _, err := New(context.Background(), bad, nil); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("a 5-character token: %v", err)
	}
	if _, err := ParseConfig("c.yaml", []byte("admin:\n  token_file: t\n  token_env: T\n")); err == nil {
		t.Error("token_file and token_env together were accepted")
	}
}

// TestAdminListener: with admin.addr set, the admin endpoints move to
// their own listener (token from a file) and the http listener answers 404
// for them while it keeps serving the API and health checks.
func TestAdminListener(t *testing.T) {
	cfg := adminConfig(t)
	tokFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokFile, []byte(adminToken+"\n"), 0o600)
	cfg.Admin.Addr = "127.0.0.1:0"
	cfg.Admin.TokenFile = tokFile
	r := start(t, cfg)
	admin := "http://" + r.srv.Addr(ListenerAdmin)
	for _, p := range []string{"/v1/rules", "/status.json", "/", "/metrics", "/debug/pprof/"} {
		if code, _ := get(t, r.url(p), adminToken); code != http.StatusNotFound {
			t.Errorf("%s on the http listener: %d, want 404", p, code)
		}
		if code, _ := get(t, admin+p, ""); code != http.StatusUnauthorized {
			t.Errorf("%s on the admin listener without the token: %d, want 401", p, code)
		}
		if code, _ := get(t, admin+p, adminToken); code != http.StatusOK {
			t.Errorf("%s on the admin listener: %d, want 200", p, code)
		}
	}
	for _, base := range []string{r.url(""), admin} {
		if code, _ := get(t, base+"/healthz", ""); code != http.StatusOK {
			t.Errorf("%s/healthz: %d", base, code)
		}
	}
}

// TestKeysMasked: a rejected API key, an unlimited key in the rules and a
// shadow rule's key are shown with their entry names and masked values on
// the status feed, the rule listing and in the log; the token (or
// show_key_values) shows them.
func TestKeysMasked(t *testing.T) {
	t.Setenv("FG_TEST_ADMIN_TOKEN", adminToken)
	cfg := adminConfig(t)
	cfg.Admin.TokenEnv = "FG_TEST_ADMIN_TOKEN"
	cfg.Shadow = false
	r := start(t, cfg)
	c, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		c.ShouldRateLimit(ctx, rlsReq("default", "header:x-api-key", "sk_live_secret123"))
		c.ShouldRateLimit(ctx, rlsReq("default", "session", "sess-cookie-value-42", "client", "acme"))
	}
	resp, err := c.ShouldRateLimit(ctx, rlsReq("default", "header:x-api-key", "sk_live_secret123"))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("fourth call for the key: %v %v", resp, err)
	}
	_, feed := get(t, r.url("/status.json"), adminToken)
	masked := "header:x-api-key=" + maskValue("sk_live_secret123")
	if strings.Contains(feed, "sk_live_secret123") || !strings.Contains(feed, masked) {
		t.Errorf("status.json shows the key unmasked, or not %q:\n%s", masked, feed)
	}
	_, rulesOpen := get(t, r.url("/v1/rules"), adminToken)
	if !strings.Contains(rulesOpen, "sk_live_unlimited_vip") || !strings.Contains(rulesOpen, cfg.Rules) {
		t.Errorf("/v1/rules with the token hides what it should show:\n%s", rulesOpen)
	}
	logs := r.logs.String()
	if !strings.Contains(logs, "session-shadow") || strings.Contains(logs, "sess-cookie-value-42") ||
		!strings.Contains(logs, "session="+maskValue("sess-cookie-value-42")+"|client=acme") {
		t.Errorf("the shadow log shows the session value, or not its masked form:\n%s", logs)
	}

	// show_key_values shows them.
	cfg2 := adminConfig(t)
	cfg2.Admin.ShowKeyValues = true
	r2 := start(t, cfg2)
	c2, _ := rlsClient(t, r2.srv.Addr(ListenerGRPC))
	for i := 0; i < 2; i++ {
		c2.ShouldRateLimit(ctx, rlsReq("default", "header:x-api-key", "sk_live_secret123"))
	}
	if _, feed := get(t, r2.url("/status.json"), ""); !strings.Contains(feed, "header:x-api-key=sk_live_secret123") {
		t.Errorf("show_key_values: the feed masks the key:\n%s", feed)
	}
}

// TestRulesListingUnauthenticated: without a token configured, /v1/rules
// shows neither the unlimited key's value nor the rule file's directory.
func TestRulesListingUnauthenticated(t *testing.T) {
	cfg := adminConfig(t)
	r := start(t, cfg)
	code, body := get(t, r.url("/v1/rules"), "")
	if code != http.StatusOK || strings.Contains(body, "sk_live_unlimited_vip") || strings.Contains(body, filepath.Dir(cfg.Rules)) {
		t.Fatalf("/v1/rules: %d, shows a key value or the file's path:\n%s", code, body)
	}
	if !strings.Contains(body, `"file":"rules.yaml"`) || !strings.Contains(body, "header:x-api-key = "+maskValue("sk_live_unlimited_vip")) {
		t.Fatalf("/v1/rules does not name the file or the masked override:\n%s", body)
	}
	if _, feed := get(t, r.url("/status.json"), ""); strings.Contains(feed, "sk_live_unlimited_vip") ||
		!strings.Contains(feed, maskValue("sk_live_unlimited_vip")) {
		t.Fatalf("status.json shows the unlimited key's value, or not its masked form:\n%s", feed)
	}
}

// TestStoreDetailsHidden: with Redis down, /readyz and status.json tell
// an unauthenticated caller that the store is unavailable, but not its
// address or the dial error; the token shows them.
func TestStoreDetailsHidden(t *testing.T) {
	rs := redistest.Start(t)
	t.Setenv("FG_TEST_ADMIN_TOKEN", adminToken)
	cfg := testConfig()
	cfg.Store = Store{Type: StoreRedis, Addrs: []string{rs.Addr()}, Prefix: "fgadmin"}
	cfg.Arrangement.Mode = "centralized"
	cfg.Admin.TokenEnv = "FG_TEST_ADMIN_TOKEN"
	r := start(t, cfg)
	rs.Kill()
	c, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	var body string
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c.ShouldRateLimit(context.Background(), rlsReq("default", "client", "x"))
		var code int
		if code, body = get(t, r.url("/readyz"), adminToken); code == http.StatusServiceUnavailable && strings.Contains(body, rs.Addr()) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("/readyz with the token and Redis down: %d %q, want 503 naming %s", code, body, rs.Addr())
		}
	}
	port := rs.Addr()[strings.LastIndexByte(rs.Addr(), ':')+1:]
	code, open := get(t, r.url("/readyz"), "")
	if code != http.StatusServiceUnavailable || strings.Contains(open, port) || !strings.Contains(open, "shared store") {
		t.Errorf("/readyz without the token: %d %q, want 503 without the address", code, open)
	}
	// The feed's store figures are refreshed on their own schedule: wait
	// for them to carry the error /readyz already shows.
	var fcode int
	var feed string
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if fcode, feed = get(t, r.url("/status.json"), adminToken); strings.Contains(feed, port) || time.Now().After(end) {
			break
		}
	}
	if !strings.Contains(feed, port) {
		t.Errorf("status.json with the token (%d) lacks the store error:\n%s", fcode, feed)
	}
	// The counts taken during the outage cannot be pushed: an unclean stop.
	if err := r.stopErr(t); !errors.Is(err, ErrUncleanShutdown) {
		t.Errorf("stop with Redis down: %v, want ErrUncleanShutdown", err)
	}
}

// TestStoreDetailsOnAdminListener: without a token, the separate admin
// listener is trusted with details (its address is the operators'), and
// the http listener is not.
func TestStoreDetailsOnAdminListener(t *testing.T) {
	rs := redistest.Start(t)
	cfg := testConfig()
	cfg.Store = Store{Type: StoreRedis, Addrs: []string{rs.Addr()}, Prefix: "fgadmin2"}
	cfg.Arrangement.Mode = "centralized"
	cfg.Admin.Addr = "127.0.0.1:0"
	r := start(t, cfg)
	admin := "http://" + r.srv.Addr(ListenerAdmin)
	rs.Kill()
	port := rs.Addr()[strings.LastIndexByte(rs.Addr(), ':')+1:]
	c, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c.ShouldRateLimit(context.Background(), rlsReq("default", "client", "x"))
		code, body := get(t, admin+"/readyz", "")
		if code == http.StatusServiceUnavailable && strings.Contains(body, port) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("/readyz on the admin listener with Redis down: %d %q, want 503 naming port %s", code, body, port)
		}
	}
	if code, body := get(t, r.url("/readyz"), ""); code != http.StatusServiceUnavailable || strings.Contains(body, port) {
		t.Errorf("/readyz on the http listener: %d %q, want 503 without the address", code, body)
	}
	// The feed's store figures are refreshed on their own schedule: wait
	// for them to carry the error /readyz already shows.
	var feed string
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, feed = get(t, admin+"/status.json", ""); strings.Contains(feed, port) || time.Now().After(end) {
			break
		}
	}
	if !strings.Contains(feed, port) {
		t.Errorf("status.json on the admin listener lacks the store error:\n%s", feed)
	}
	r.stopErr(t) // counts taken during the outage cannot be pushed
}

// TestStatusHistory: the server records a point of history a second, and
// the status page's history.json serves them: a request checked shows in
// a point within a few seconds.
func TestStatusHistory(t *testing.T) {
	r := start(t, adminConfig(t))
	resp, err := http.Post(r.url("/v1/check"), "application/json",
		strings.NewReader(`{"descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := get(t, r.url("/history.json"), "")
		var hf statuspage.HistoryFeed
		if code != http.StatusOK || json.Unmarshal([]byte(body), &hf) != nil {
			t.Fatalf("history.json: %d %.200s", code, body)
		}
		decided := 0
		for _, p := range hf.Points {
			decided += int(p.Decided)
		}
		if decided >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no point of history holds the request checked a minute ago: %+v", hf)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
