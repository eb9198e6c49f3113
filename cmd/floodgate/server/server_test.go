package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/internal/testkit/syncbuf"
)

// testConfig is the default configuration on ephemeral loopback ports.
func testConfig() Config {
	c := DefaultConfig()
	c.HTTP.Addr = "127.0.0.1:0"
	c.GRPC.Addr = "127.0.0.1:0"
	c.Gateway.Addr = "127.0.0.1:0"
	c.ShutdownTimeout = 5 * time.Second
	return c
}

type running struct {
	srv  *Server
	stop context.CancelFunc
	done chan error
	logs *syncbuf.Buffer
}

// start runs a server for cfg until the test ends (or r.shutdown).
func start(t *testing.T, cfg Config) *running {
	t.Helper()
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := New(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{srv: srv, stop: cancel, done: make(chan error, 1), logs: logs}
	go func() { r.done <- srv.Serve(ctx) }()
	t.Cleanup(func() { r.shutdown(t) })
	return r
}

func (r *running) shutdown(t *testing.T) {
	r.stop()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
		r.done <- nil // later calls return at once
	case <-time.After(15 * time.Second):
		t.Fatal("server did not stop")
	}
}

func (r *running) url(path string) string { return "http://" + r.srv.Addr(ListenerHTTP) + path }

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func rlsClient(t *testing.T, addr string) (rlsv3.RateLimitServiceClient, healthpb.HealthClient) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn)
}

func rlsReq(domain string, kv ...string) *rlsv3.RateLimitRequest {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{d}}
}

func TestServeDefaults(t *testing.T) {
	r := start(t, testConfig())
	if code, body := httpGet(t, r.url("/healthz")); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz %d %q", code, body)
	}
	if code, body := httpGet(t, r.url("/readyz")); code != 200 {
		t.Fatalf("/readyz %d %q", code, body)
	}
	code, body := httpGet(t, r.url("/v1/rules"))
	if code != 200 || !strings.Contains(body, `"domain":"default"`) || !strings.Contains(body, `"per-client"`) {
		t.Fatalf("/v1/rules %d %s", code, body)
	}
	if code, body := httpGet(t, r.url("/")); code != 200 || !strings.Contains(strings.ToLower(body), "<html") {
		t.Fatalf("status page %d %.200s", code, body)
	}

	// The built-in rules through gRPC: per-client, 600 a minute.
	c, h := rlsClient(t, r.srv.Addr(ListenerGRPC))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, rlsReq("default", "client", "acme"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 600 ||
		resp.Statuses[0].LimitRemaining != 599 {
		t.Fatalf("RLS answer %v", resp)
	}
	// The JSON API shares the engine and its counters.
	hr, err := http.Post(r.url("/v1/check"), "application/json",
		strings.NewReader(`{"domain":"default","descriptors":[{"entries":[{"key":"client","value":"acme"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Allowed  bool
		Statuses []struct{ Remaining int64 }
	}
	json.NewDecoder(hr.Body).Decode(&out)
	hr.Body.Close()
	if !out.Allowed || len(out.Statuses) != 1 || out.Statuses[0].Remaining != 598 {
		t.Fatalf("/v1/check after one RLS call: %+v", out)
	}
	hs, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || hs.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health %v %v", hs, err)
	}
	// Decisions show up in the metrics.
	code, body = httpGet(t, r.url("/metrics"))
	if code != 200 || !strings.Contains(body, `rule="per-client"`) {
		t.Fatalf("/metrics %d; no per-client decisions in:\n%.2000s", code, body)
	}
	for _, m := range []string{"floodgate_memstore_evictions_total 0", "floodgate_memstore_max_bytes 1.073741824e+09", "floodgate_memstore_charged_total 0"} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics has no %q", m)
		}
	}
	r.shutdown(t)
	if _, err := http.Get(r.url("/healthz")); err == nil {
		t.Fatal("HTTP listener still accepting after shutdown")
	}
}

func TestGatewayAndGracefulShutdown(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "upstream "+r.URL.Path)
	}))
	defer up.Close()
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesFile, []byte(`
domain: gw
rules:
  - name: loan
    match: {path: {prefix: /loan/}}
    count_by: [ip]
    limit: 2
    window: 1h
    algorithm: fixed-window
`), 0o644)
	cfg := testConfig()
	cfg.Rules = rulesFile
	cfg.Gateway.Routes = []Route{{Prefix: "/", Upstream: up.URL}}
	r := start(t, cfg)
	gw := "http://" + r.srv.Addr(ListenerGateway)
	for i := 0; i < 2; i++ {
		if code, body := httpGet(t, gw+"/loan/list"); code != 200 || body != "upstream /loan/list" {
			t.Fatalf("gateway /loan/list: %d %q", code, body)
		}
	}
	if code, _ := httpGet(t, gw+"/loan/list"); code != 429 {
		t.Fatalf("3rd /loan/ request through the gateway: %d, want 429", code)
	}
	if code, _ := httpGet(t, gw+"/catalog/search"); code != 200 {
		t.Fatalf("uncovered path: %d", code)
	}
	// The tests log at debug level: every request has an access record.
	if logs := r.logs.String(); !strings.Contains(logs, "msg=request listener=gateway method=GET path=/loan/list status=429") {
		t.Fatalf("no access log record for the rejected request:\n%s", logs)
	}

	// A request in flight when shutdown starts is finished, not cut off.
	type result struct {
		code int
		body string
		err  error
	}
	resc := make(chan result, 1)
	go func() {
		resp, err := http.Get(gw + "/slow")
		if err != nil {
			resc <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resc <- result{code: resp.StatusCode, body: string(b)}
	}()
	<-entered
	r.stop()
	// Shutdown has begun: new connections are refused.
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", r.srv.Addr(ListenerGateway), time.Second)
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("gateway still accepting connections after shutdown began")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	res := <-resc
	if res.err != nil || res.code != 200 || res.body != "upstream /slow" {
		t.Fatalf("in-flight request during shutdown: %+v", res)
	}
	if err := <-r.done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	r.done <- nil
}

func TestRulesHotReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	write := func(limit string) {
		os.WriteFile(file, []byte("domain: d\nrules:\n  - name: r\n    match: {client: \"*\"}\n    count_by: [client]\n    limit: "+limit+"\n    window: 1m\n"), 0o644)
	}
	write("5")
	cfg := testConfig()
	cfg.Rules = file
	r := start(t, cfg)
	// editUntil makes an edit, and makes it again every 2 s until ok: the
	// watcher starts in the background, and an edit made before it watches
	// is seen only by the next one (2 s leaves the watcher's 100 ms of
	// quiet before a reload, on a stalled machine too).
	editUntil := func(what string, edit func(), ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		edit()
		for again := time.Now().Add(2 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; logs:\n%s", what, r.logs.String())
			}
			if time.Now().After(again) {
				edit()
				again = time.Now().Add(2 * time.Second)
			}
		}
	}
	editUntil("reload to limit 7", func() { write("7") }, func() bool {
		_, body := httpGet(t, r.url("/v1/rules"))
		return strings.Contains(body, `"limit":7`)
	})
	bad := func() { os.WriteFile(file, []byte("domain: d\nrules:\n  - name: r\n    limitt: 3\n"), 0o644) }
	editUntil("the bad file to be reported", bad, func() bool { return strings.Contains(r.logs.String(), "reload failed") })
	if _, body := httpGet(t, r.url("/v1/rules")); !strings.Contains(body, `"limit":7`) {
		t.Fatalf("a bad file replaced the rules in force: %s", body)
	}
	// The watcher runs (it reported the bad file): the next good file is a
	// reload, and the watcher's OnReload hook counts both outcomes.
	editUntil("reload to limit 9", func() { write("9") }, func() bool {
		_, body := httpGet(t, r.url("/v1/rules"))
		return strings.Contains(body, `"limit":9`)
	})
	_, body := httpGet(t, r.url("/metrics"))
	for _, series := range []string{`floodgate_rule_reloads_total{result="success"} `, `floodgate_rule_reloads_total{result="failure"} `} {
		i := strings.Index(body, series)
		if i < 0 || strings.HasPrefix(body[i+len(series):], "0\n") {
			t.Fatalf("%sis missing or 0 after a good and a bad reload:\n%.3000s", series, body)
		}
	}
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	cfg := testConfig()
	cfg.HTTP.TLS = TLS{Cert: cert, Key: key}
	cfg.GRPC.TLS = TLS{Cert: cert, Key: key}
	r := start(t, cfg)
	pool := x509.NewCertPool()
	pemData, _ := os.ReadFile(cert)
	pool.AppendCertsFromPEM(pemData)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	defer http.DefaultClient.CloseIdleConnections() // the plain requests below
	resp, err := client.Get("https://" + r.srv.Addr(ListenerHTTP) + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("HTTPS /healthz: %d tls=%v", resp.StatusCode, resp.TLS != nil)
	}
	// gRPC over TLS, verified against the same certificate.
	conn, err := grpc.NewClient(r.srv.Addr(ListenerGRPC), grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(pool, "")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rresp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, rlsReq("default", "client", "tls"))
	if err != nil || rresp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("RLS over TLS: %v %v", rresp, err)
	}
	// A plain-text gRPC client is refused.
	plain, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer pcancel()
	if _, err := plain.ShouldRateLimit(pctx, rlsReq("default", "client", "tls")); err == nil {
		t.Fatal("plain-text gRPC served on the TLS listener")
	}
	// A plain request to a TLS listener gets a 400 response, not an error;
	// what matters is that it is not served as healthy.
	if resp, err := http.Get("http://" + r.srv.Addr(ListenerHTTP) + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP served on the TLS listener")
		}
	}
}

func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

// TestRedisReadinessAndShutdownPush runs the server on a real redis-server:
// /readyz follows the store, and counts a delayed node has not synced yet
// are pushed when the server shuts down.
func TestRedisReadinessAndShutdownPush(t *testing.T) {
	rs := redistest.Start(t)
	cfg := testConfig()
	cfg.Store = Store{Type: StoreRedis, Addrs: []string{rs.Addr()}, Prefix: "fgtest"}
	cfg.Arrangement.Mode = "delayed"
	cfg.Arrangement.Interval = time.Hour // no sync but the one at shutdown
	r := start(t, cfg)
	if code, body := httpGet(t, r.url("/readyz")); code != 200 {
		t.Fatalf("/readyz with Redis up: %d %s", code, body)
	}
	c, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 5; i++ {
		if _, err := c.ShouldRateLimit(ctx, rlsReq("default", "client", "pushed")); err != nil {
			t.Fatal(err)
		}
	}
	r.shutdown(t)
	if !strings.Contains(r.logs.String(), "unsynced counts pushed") {
		t.Fatalf("shutdown did not report pushing counts:\n%s", r.logs.String())
	}

	// A second server, centralized on the same Redis, sees the 5 counts.
	cfg2 := testConfig()
	cfg2.Store = cfg.Store
	cfg2.Arrangement.Mode = "centralized"
	cfg2.Arrangement.Deadline = time.Second
	r2 := start(t, cfg2)
	c2, _ := rlsClient(t, r2.srv.Addr(ListenerGRPC))
	resp, err := c2.ShouldRateLimit(ctx, rlsReq("default", "client", "pushed"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Statuses[0].LimitRemaining; got != 600-6 {
		t.Fatalf("remaining after 5 pushed counts and 1 more: %d, want %d", got, 600-6)
	}

	rs.Kill()
	if code, body := httpGet(t, r2.url("/readyz")); code != 503 || !strings.Contains(body, "not ready") {
		t.Fatalf("/readyz with Redis killed: %d %q", code, body)
	}
	// The built-in rules fail open: with Redis dead, calls are still
	// answered, and allowed.
	for i := 0; i < 5; i++ {
		resp, err := c2.ShouldRateLimit(ctx, rlsReq("default", "client", "outage"))
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d with Redis down: %v %v", i, resp, err)
		}
	}
	// The gRPC health service follows readiness.
	_, h2 := rlsClient(t, r2.srv.Addr(ListenerGRPC))
	deadline := time.Now().Add(10 * time.Second)
	for {
		hs, err := h2.Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && hs.Status == healthpb.HealthCheckResponse_NOT_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gRPC health with Redis down: %v %v", hs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rs.Restart()
	deadline = time.Now().Add(10 * time.Second)
	for {
		code, body := httpGet(t, r2.url("/readyz"))
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after Redis restarted: %d %q", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestNewErrors(t *testing.T) {
	cfg := testConfig()
	cfg.Rules = filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := New(context.Background(), cfg, nil); err == nil {
		t.Fatal("missing rule file accepted")
	}
	cfg = testConfig()
	cfg.TrustedProxies = []string{"not-a-cidr"}
	if _, err := New(context.Background(), cfg, nil); err == nil {
		t.Fatal("bad trusted proxy accepted")
	}
}

func TestRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	cfg := testConfig()
	cfg.Store = Store{Type: StoreRedisCluster, Addrs: cl.Addrs(), Prefix: "fgtest"}
	cfg.Arrangement.Mode = "centralized"
	cfg.Arrangement.Deadline = time.Second
	r := start(t, cfg)
	if code, body := httpGet(t, r.url("/readyz")); code != 200 {
		t.Fatalf("/readyz on a cluster: %d %s", code, body)
	}
	c, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		resp, err := c.ShouldRateLimit(ctx, rlsReq("default", "client", "c"+strings.Repeat("x", i)))
		if err != nil || resp.Statuses[0].LimitRemaining != 599 {
			t.Fatalf("call %d on a cluster: %v %v", i, resp, err)
		}
	}
	resp, err := c.ShouldRateLimit(ctx, rlsReq("default", "client", "c"))
	if err != nil || resp.Statuses[0].LimitRemaining != 598 {
		t.Fatalf("second call for one key on a cluster: %v %v", resp, err)
	}
}

// TestStartDuringRedisOutage starts the server while Redis is down: it
// serves, fails open, reports not ready, and becomes ready when Redis
// returns.
func TestStartDuringRedisOutage(t *testing.T) {
	rs := redistest.Start(t)
	rs.Kill()
	cfg := testConfig()
	cfg.Store = Store{Type: StoreRedis, Addrs: []string{rs.Addr()}, Prefix: "fgtest"}
	cfg.Arrangement.Mode = "centralized"
	r := start(t, cfg)
	if code, _ := httpGet(t, r.url("/readyz")); code != 503 {
		t.Fatalf("/readyz with Redis down at start: %d", code)
	}
	c, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, rlsReq("default", "client", "early"))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("call with Redis down at start: %v %v", resp, err)
	}
	rs.Restart()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := httpGet(t, r.url("/readyz"))
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after Redis came up: %d %q", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestGlobalShadow(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(file, []byte("domain: d\nrules:\n  - name: tiny\n    match: {client: \"*\"}\n    count_by: [client]\n    limit: 1\n    window: 1h\n"), 0o644)
	cfg := testConfig()
	cfg.Rules = file
	cfg.Shadow = true
	r := start(t, cfg)
	c, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		resp, err := c.ShouldRateLimit(ctx, rlsReq("d", "client", "a"))
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d under the global shadow switch: %v %v", i, resp, err)
		}
	}
	if !strings.Contains(r.logs.String(), "shadow rule would reject") {
		t.Fatalf("shadow rejections not logged:\n%s", r.logs.String())
	}
	if _, body := httpGet(t, r.url("/v1/rules")); !strings.Contains(body, `"shadow":true`) || strings.Contains(body, `"shadow":false`) {
		t.Fatalf("/v1/rules under the global shadow switch: %s", body)
	}
	if _, body := httpGet(t, r.url("/status.json")); !strings.Contains(body, `"shadow":true`) {
		t.Fatalf("status feed does not show the rule as shadow under the global switch: %.500s", body)
	}
}
