package server

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// stopErr stops r and returns what Serve returned.
func (r *running) stopErr(t *testing.T) error {
	t.Helper()
	r.stop()
	select {
	case err := <-r.done:
		r.done <- nil // the cleanup's shutdown returns at once
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("server did not stop")
		return nil
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestShutdownCountsCutRequests: an HTTP request whose body never comes and
// an RLS call stuck on a paused Redis are still running at the shutdown
// timeout. Shutdown cuts them, says how many in the log, and Serve returns
// ErrUncleanShutdown; the RLS caller gets an error, not a decision.
func TestShutdownCountsCutRequests(t *testing.T) {
	rs := redistest.Start(t)
	cfg := testConfig()
	cfg.Store = Store{Type: StoreRedis, Addrs: []string{rs.Addr()}, Prefix: "fgcut"}
	cfg.Arrangement.Mode = "centralized"
	cfg.Arrangement.Deadline = 10 * time.Second // the call waits on the paused Redis
	cfg.ShutdownTimeout = 300 * time.Millisecond
	r := start(t, cfg)
	c, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	if _, err := c.ShouldRateLimit(context.Background(), rlsReq("default", "client", "warm")); err != nil {
		t.Fatal(err)
	}

	conn, err := net.Dial("tcp", r.srv.Addr(ListenerHTTP))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	rs.Pause()
	defer rs.Resume()
	callErr := make(chan error, 1)
	go func() {
		_, err := c.ShouldRateLimit(context.Background(), rlsReq("default", "client", "stuck"))
		callErr <- err
	}()
	waitFor(t, "one request in each front end", func() bool {
		return r.srv.inflight.http.Load() == 1 && r.srv.inflight.grpc.Load() == 1
	})

	err = r.stopErr(t)
	if !errors.Is(err, ErrUncleanShutdown) || !strings.Contains(err.Error(), "1 HTTP requests and 1 gRPC calls") {
		t.Fatalf("Serve returned %v, want ErrUncleanShutdown naming 1 HTTP request and 1 gRPC call", err)
	}
	logs := r.logs.String()
	if !strings.Contains(logs, "http_requests_cut=1") || !strings.Contains(logs, "grpc_calls_cut=1") {
		t.Fatalf("the log does not count the cut requests:\n%s", logs)
	}
	if err := <-callErr; err == nil {
		t.Fatal("the cut RLS call got an answer")
	}
}

// TestShutdownCleanAndUnpushed: a shutdown with nothing running and counts
// pushed returns nil; one whose unsynced counts cannot reach Redis (killed)
// returns ErrUncleanShutdown.
func TestShutdownCleanAndUnpushed(t *testing.T) {
	rs := redistest.Start(t)
	cfg := testConfig()
	cfg.Store = Store{Type: StoreRedis, Addrs: []string{rs.Addr()}, Prefix: "fgunpushed"}
	cfg.Arrangement.Mode = "delayed"
	cfg.Arrangement.Interval = time.Hour // nothing is pushed before shutdown
	cfg.ShutdownTimeout = 500 * time.Millisecond

	clean := start(t, cfg)
	c, _ := rlsClient(t, clean.srv.Addr(ListenerGRPC))
	if _, err := c.ShouldRateLimit(context.Background(), rlsReq("default", "client", "a")); err != nil {
		t.Fatal(err)
	}
	if err := clean.stopErr(t); err != nil {
		t.Fatalf("clean shutdown returned %v", err)
	}

	r := start(t, cfg)
	c, _ = rlsClient(t, r.srv.Addr(ListenerGRPC))
	if _, err := c.ShouldRateLimit(context.Background(), rlsReq("default", "client", "b")); err != nil {
		t.Fatal(err)
	}
	rs.Kill()
	err := r.stopErr(t)
	if !errors.Is(err, ErrUncleanShutdown) || !strings.Contains(err.Error(), "unsynced counts could not be pushed") {
		t.Fatalf("shutdown with Redis killed returned %v, want ErrUncleanShutdown about unsynced counts", err)
	}
}
