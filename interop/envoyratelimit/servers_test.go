package envoyratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/service_cmd/runner"
	"github.com/envoyproxy/ratelimit/src/settings"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/server"
	"github.com/floodgate-dev/floodgate/internal/testkit/fixedport"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// rls is one running Rate Limit Service under test: its gRPC client and
// the base URL of the HTTP listener that serves POST /json.
type rls struct {
	name     string
	client   pb.RateLimitServiceClient
	grpcAddr string
	httpURL  string
	// debugURL is the debug listener's base URL (/rlconfig), "" when the
	// server has none.
	debugURL string
}

// runtimeLayout is where a reference-style runtime directory keeps its rule
// files: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
type runtimeLayout struct {
	root, subdir string
}

// configDir is the directory both servers read rule files from.
func (l runtimeLayout) configDir() string { return l.root + "/" + l.subdir + "/config" }

// referenceEnv returns the environment the reference reads its settings
// from (src/settings/settings.go): the runtime directory, Redis over TCP
// and loopback listeners on free ports. extra entries are added last.
func referenceEnv(t testing.TB, layout runtimeLayout, redisAddr string, extra map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{
		"RUNTIME_ROOT":         layout.root,
		"RUNTIME_SUBDIRECTORY": layout.subdir,
		"RUNTIME_APPDIRECTORY": "config",
		"RUNTIME_WATCH_ROOT":   "true",
		"HOST":                 "127.0.0.1",
		"PORT":                 strconv.Itoa(fixedport.Free(t)),
		"GRPC_HOST":            "127.0.0.1",
		"GRPC_PORT":            strconv.Itoa(fixedport.Free(t)),
		"DEBUG_HOST":           "127.0.0.1",
		"DEBUG_PORT":           strconv.Itoa(fixedport.Free(t)),
		"REDIS_SOCKET_TYPE":    "tcp",
		"REDIS_TYPE":           "single",
		"REDIS_URL":            redisAddr,
		"USE_STATSD":           "false",
		"DISABLE_STATS":        "true",
		"LOG_LEVEL":            "error",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// startReference runs envoyproxy/ratelimit's own runner in this process
// with the settings it reads from env, and stops it when the test ends.
func startReference(t testing.TB, env map[string]string) *rls {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	s := settings.NewSettings()
	r := runner.NewRunner(s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run()
	}()
	grpcAddr := net.JoinHostPort(s.GrpcHost, strconv.Itoa(s.GrpcPort))
	httpAddr := net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
	debugAddr := net.JoinHostPort(s.DebugHost, strconv.Itoa(s.DebugPort))
	waitTCP(t, grpcAddr)
	waitTCP(t, httpAddr)
	waitTCP(t, debugAddr)
	t.Cleanup(func() {
		r.Stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("reference server did not stop within 10s")
		}
	})
	c := dial(t, "reference", grpcAddr, "http://"+httpAddr)
	c.debugURL = "http://" + debugAddr
	return c
}

// startFloodgate runs Floodgate's server in this process in its own mode,
// reading the rule files in rulesDir, with its counters in the Redis at
// redisAddr, every decision one call to Redis (the centralized
// arrangement), and stops it when the test ends.
func startFloodgate(t testing.TB, rulesDir, redisAddr string) (*rls, error) {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.GRPC.Addr = "127.0.0.1:0"
	cfg.Rules = rulesDir
	cfg.Store.Type = server.StoreRedis
	cfg.Store.Addrs = []string{redisAddr}
	cfg.Arrangement.Mode = "centralized"
	cfg.Arrangement.Deadline = time.Second
	cfg.Arrangement.MaxDeadline = 2 * time.Second
	return serveFloodgate(t, "floodgate", cfg)
}

// serveFloodgate builds, binds and serves a Floodgate server with cfg; it
// returns the error of a server that does not start (its rules refused).
func serveFloodgate(t testing.TB, name string, cfg server.Config) (*rls, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		return nil, err
	}
	if err := srv.Listen(); err != nil {
		cancel()
		t.Fatalf("%s listen: %v", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("%s stopped with: %v", name, err)
		}
	})
	return dial(t, name, srv.Addr(server.ListenerGRPC), "http://"+srv.Addr(server.ListenerHTTP)), nil
}

func dial(t testing.TB, name, grpcAddr, httpURL string) *rls {
	t.Helper()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dialing %s at %s: %v", name, grpcAddr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rls{name: name, client: pb.NewRateLimitServiceClient(conn), grpcAddr: grpcAddr, httpURL: httpURL}
}

// startRedis starts a real redis-server on a free loopback port.
func startRedis(t testing.TB) *redistest.Server { return redistest.Start(t) }

// waitTCP waits until addr accepts connections (at most 20 s).
func waitTCP(t testing.TB, addr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s after 20s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// httpClient is the client of every /json request.
var httpClient = &http.Client{Timeout: 10 * time.Second}

func (r *rls) String() string { return fmt.Sprintf("%s(%s)", r.name, r.grpcAddr) }
