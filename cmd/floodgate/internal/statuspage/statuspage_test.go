package statuspage

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/metrics"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

const testRules = `
domain: shop
rules:
  - name: per-client
    match: {client: "*"}
    count_by: [client]
    limit: 5
    window: 1m
  - name: audit-ip
    match: {ip: "*"}
    count_by: [ip]
    limit: 3
    window: 1h
    shadow: true
`

// liveSource is a real rule engine over the memory store, feeding a real
// recorder, as the server wires them.
type liveSource struct {
	set   *rules.Set
	eng   *rules.Engine
	rec   *metrics.Recorder
	polls atomic.Int64
}

func newLiveSource(t testing.TB) *liveSource {
	t.Helper()
	set, err := rules.Parse("test.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	s := &liveSource{set: set, eng: rules.NewEngine(set, memstore.New(memstore.Options{})), rec: metrics.New()}
	s.rec.SetStore(metrics.StoreHealth{Type: "memory", Arrangement: "local", Up: true, Keys: 3})
	return s
}

func (s *liveSource) Rules() []rules.RuleInfo { return s.set.Rules() }

func (s *liveSource) Snapshot() metrics.Snapshot {
	s.polls.Add(1)
	return s.rec.Snapshot()
}

// check sends one request through the engine and records it.
func (s *liveSource) check(t testing.TB, client, ip string) rules.Result {
	t.Helper()
	start := time.Now()
	res, err := s.eng.Check(context.Background(), rules.Request{Domain: "shop", Descriptors: []rules.Descriptor{
		{{Key: "client", Value: client}},
		{{Key: "ip", Value: ip}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.rec.Observe(res, time.Since(start))
	return res
}

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Result()
}

func TestRoutes(t *testing.T) {
	h := Handler(newLiveSource(t))
	for _, tc := range []struct {
		path, ctype, contains string
	}{
		{"/", "text/html", `<script src="status.js">`},
		{"/index.html", "text/html", "Top rejected keys"},
		{"/status.js", "text/javascript", "textContent"},
		{"/status.css", "text/css", ".card"},
		{"/status.json", "application/json", `"rules"`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp := get(t, h, "GET", tc.path)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.ctype) ||
				!strings.Contains(string(body), tc.contains) {
				t.Errorf("GET %s: %d %q, body contains %q: %v", tc.path, resp.StatusCode,
					resp.Header.Get("Content-Type"), tc.contains, strings.Contains(string(body), tc.contains))
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
				t.Errorf("GET %s: CSP %q", tc.path, csp)
			}
		})
	}
	if resp := get(t, h, "GET", "/nope"); resp.StatusCode != 404 {
		t.Errorf("GET /nope: %d", resp.StatusCode)
	}
	if resp := get(t, h, "POST", "/status.json"); resp.StatusCode != 405 || resp.Header.Get("Allow") == "" {
		t.Errorf("POST /status.json: %d allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if resp := get(t, h, "HEAD", "/"); resp.StatusCode != 200 {
		t.Errorf("HEAD /: %d", resp.StatusCode)
	}
}

// TestNoExternalAssets checks the page loads nothing from another origin.
func TestNoExternalAssets(t *testing.T) {
	for _, name := range []string{"assets/index.html", "assets/status.js", "assets/status.css"} {
		b, err := assets.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"http://", "https://", "//cdn", "@import", "innerHTML", "eval("} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s contains %q", name, bad)
			}
		}
	}
}

func TestFeedFromRealEngine(t *testing.T) {
	src := newLiveSource(t)
	for range 8 {
		src.check(t, "acme", "10.0.0.1")
	}
	resp := get(t, Handler(src), "GET", "/status.json")
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q", cc)
	}
	var feed Feed
	if err := json.NewDecoder(resp.Body).Decode(&feed); err != nil {
		t.Fatal(err)
	}
	if len(feed.Rules) != 2 || feed.Rules[0].Name != "per-client" || feed.Rules[0].Window != time.Minute ||
		feed.Rules[0].Limit != 5 || feed.Rules[1].Window != time.Hour || !feed.Rules[1].Shadow {
		t.Fatalf("rules %+v", feed.Rules)
	}
	m := feed.Metrics
	// per-client allows 5 and rejects 3; audit-ip (shadow, limit 3) counts
	// only requests that pass, and shadow-rejects once it is full.
	stats := map[string]metrics.RuleStats{}
	for _, r := range m.Rules {
		stats[r.Rule] = r
	}
	if pc := stats["per-client"]; pc.Allowed != 5 || pc.Rejected != 3 {
		t.Errorf("per-client %+v, want 5 allowed 3 rejected", pc)
	}
	if ai := stats["audit-ip"]; ai.ShadowRejected == 0 || ai.Rejected != 0 {
		t.Errorf("audit-ip %+v, want shadow rejections only", ai)
	}
	if m.Requests.Allowed != 5 || m.Requests.Rejected != 3 {
		t.Errorf("requests %+v", m.Requests)
	}
	top := map[string]metrics.TopKey{}
	for _, k := range m.TopRejected {
		top[k.Key] = k
	}
	if k := top["shop|per-client|client=acme"]; k.Count != 3 || k.Shadow || k.Rule != "per-client" {
		t.Errorf("top rejected %+v: want acme rejected 3 times by per-client", m.TopRejected)
	}
	if k := top["shop|audit-ip|ip=10.0.0.1"]; k.Count == 0 || !k.Shadow {
		t.Errorf("top rejected %+v: want the ip shadow-rejected", m.TopRejected)
	}
	if m.Store.Type != "memory" || !m.Store.Up {
		t.Errorf("store %+v", m.Store)
	}
}

// TestMountedUnderPrefix checks the page works behind http.StripPrefix, as
// its doc says: the page, its parts and the feed resolve under the prefix.
func TestMountedUnderPrefix(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("/status/", http.StripPrefix("/status", Handler(newLiveSource(t))))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, p := range []string{"/status/", "/status/status.js", "/status/status.css", "/status/status.json"} {
		resp, err := srv.Client().Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", p, resp.StatusCode)
		}
	}
	// The page refers to its parts by relative URL, so they resolve under
	// the prefix.
	b, _ := assets.ReadFile("assets/index.html")
	for _, ref := range []string{`src="status.js"`, `href="status.css"`} {
		if !strings.Contains(string(b), ref) {
			t.Errorf("index.html lacks relative reference %s", ref)
		}
	}
	js, _ := assets.ReadFile("assets/status.js")
	if !strings.Contains(string(js), `fetch("status.json"`) {
		t.Error("status.js does not fetch the feed by relative URL")
	}
}

// historySource is a liveSource with a recorder whose history has points.
type historySource struct{ *liveSource }

func (h historySource) History() []metrics.Point { return h.rec.History() }

// TestHistoryFeed: a HistorySource's points are served at history.json,
// oldest first, with the step; a Source without a history has none (404).
func TestHistoryFeed(t *testing.T) {
	src := newLiveSource(t)
	now := time.Now()
	src.rec = metrics.New(metrics.WithClock(func() time.Time { return now }))
	src.check(t, "acme", "10.0.0.1")
	now = now.Add(time.Second)
	src.rec.RecordHistory()
	resp := get(t, Handler(historySource{src}), "GET", "/history.json")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("history.json: %d %v", resp.StatusCode, resp.Header)
	}
	var hf HistoryFeed
	if err := json.NewDecoder(resp.Body).Decode(&hf); err != nil {
		t.Fatal(err)
	}
	if hf.StepSeconds != 1 || len(hf.Points) != 1 || hf.Points[0].Decided != 1 {
		t.Fatalf("history feed %+v, want one point of one request", hf)
	}
	if resp := get(t, Handler(src), "GET", "/history.json"); resp.StatusCode != 404 {
		t.Fatalf("history.json of a source without history: %d, want 404", resp.StatusCode)
	}
}
