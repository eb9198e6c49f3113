package envoycompat

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// runServer runs the compatibility server with the settings m, overridden
// by env and then by tweak (for settings without a variable), until the
// test ends.
func runServer(t *testing.T, m, env map[string]string, tweak ...func(*Settings)) *Server {
	t.Helper()
	srv, cancel, done := launch(t, m, env, tweak...)
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return srv
}

// launch parses the environment m with env laid over it, builds the server
// and runs it until cancel; done receives what Run returned.
func launch(t *testing.T, m, env map[string]string, tweak ...func(*Settings)) (*Server, context.CancelFunc, chan error) {
	t.Helper()
	for k, v := range env {
		m[k] = v
	}
	set, err := ParseSettings(mapLookup(m))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tweak {
		f(&set)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := New(ctx, set, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	return srv, cancel, done
}

// startServer runs the compatibility server on loopback ports with a
// runtime directory holding rules, as envoyproxy/ratelimit's environment
// would configure it.
func startServer(t *testing.T, rules string, env map[string]string, tweak ...func(*Settings)) (*Server, string) {
	t.Helper()
	m, dir := compatEnv(t, rules)
	return runServer(t, m, env, tweak...), dir
}

// compatEnv writes rules into a new runtime directory and returns the
// environment that points the server at it, on loopback ports, with the
// test's Redis and a key prefix of the test's name.
func compatEnv(t *testing.T, rules string) (map[string]string, string) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "test.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisSrv.Addr(), "CACHE_KEY_PREFIX": t.Name() + ":",
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	}, dir
}

func post(t *testing.T, url, contentType, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServerJSON(t *testing.T) {
	srv, _ := startServer(t, testRules, nil)
	url := "http://" + srv.Addr(ListenerHTTP) + "/json"
	body := `{"domain":"test","descriptors":[{"entries":[{"key":"sec","value":"j"}]}]}`
	for _, tc := range []struct {
		name, ctype, body string
		code              int
		want              string
	}{
		{"first", "", body, 200, `"overallCode":"OK"`},
		{"over, any content type as the reference", "text/plain", body, 429, `"overallCode":"OVER_LIMIT"`},
		{"not JSON", "application/json", `{`, 400, "Bad Request"},
		{"empty domain", "application/json", `{"descriptors":[{"entries":[{"key":"a"}]}]}`, 400, "Bad Request"},
		{"no descriptors", "application/json", `{"domain":"test"}`, 400, "Bad Request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, got := post(t, url, tc.ctype, tc.body)
			if code != tc.code || !strings.Contains(got, tc.want) {
				t.Fatalf("%d %s, want %d with %s", code, got, tc.code, tc.want)
			}
		})
	}
	resp, err := http.Get("http://" + srv.Addr(ListenerHTTP) + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "OK" {
		t.Fatalf("/healthcheck %d %q", resp.StatusCode, b)
	}
}

func TestServerGRPCAndReload(t *testing.T) {
	srv, dir := startServer(t, testRules, nil)
	conn, err := grpc.NewClient(srv.Addr(ListenerGRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v %v", h, err)
	}
	c := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*commonv3.RateLimitDescriptor{desc("added", "x")}}
	if r, err := c.ShouldRateLimit(ctx, req); err != nil || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("before the reload: %v %v", r, err)
	}
	added := testRules + "  - key: added\n    rate_limit: {unit: day, requests_per_unit: 7}\n"
	if err := os.WriteFile(filepath.Join(dir, "test.yaml"), []byte(added), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if r, err := c.ShouldRateLimit(ctx, req); err != nil || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 7 {
		t.Fatalf("after the reload: %v %v", r, err)
	}
	// A file that does not load keeps the running rules.
	if err := os.WriteFile(filepath.Join(dir, "test.yaml"), []byte("domain: test\nbogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err == nil || !strings.Contains(err.Error(), "unknown key 'bogus'") {
		t.Fatalf("reload of a bad file: %v", err)
	}
	if r, err := c.ShouldRateLimit(ctx, req); err != nil || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 7 {
		t.Fatalf("after a failed reload: %v %v", r, err)
	}
}

func TestServerRefusesBadRules(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "config")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "x.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644)
	set, err := ParseSettings(mapLookup(map[string]string{"RUNTIME_ROOT": root, "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisSrv.Addr()}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), set, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "config.x.yaml: invalid rate limit unit 'fortnight'") {
		t.Fatalf("start with a bad rule file: %v", err)
	}
}

func TestServerGRPCUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "uds")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "rls.sock")
	srv, _ := startServer(t, testRules, map[string]string{"GRPC_UDS": sock})
	if got := srv.Addr(ListenerGRPC); got != sock {
		t.Fatalf("gRPC listens on %q, want GRPC_UDS %q", got, sock)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "test",
		Descriptors: []*commonv3.RateLimitDescriptor{desc("generic", "uds")}})
	if err != nil || r.Statuses[0].LimitRemaining != 19 {
		t.Fatalf("over GRPC_UDS: %v %v", r, err)
	}
}

func TestServerRedisStartupRetry(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Kill()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "config"), 0o755)
	os.WriteFile(filepath.Join(root, "config", "x.yaml"), []byte(testRules), 0o644)
	set, err := ParseSettings(mapLookup(map[string]string{"RUNTIME_ROOT": root, "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": addr,
		"REDIS_STARTUP_INITIAL_INTERVAL": "10ms", "REDIS_STARTUP_MAX_INTERVAL": "20ms", "REDIS_STARTUP_MAX_ELAPSED_TIME": "100ms"}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), set, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "REDIS_STARTUP_MAX_ELAPSED_TIME") {
		t.Fatalf("Redis down with a bounded startup: %v", err)
	}
	// Without a bound the start waits for Redis until it is cancelled.
	set.RedisStartupMaxElapsed = 0
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err = New(ctx, set, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("Redis down, start cancelled: %v", err)
	}
}
