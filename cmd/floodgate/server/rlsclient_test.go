package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/server"
	"github.com/floodgate-dev/floodgate/internal/testkit/syncbuf"
	"github.com/floodgate-dev/floodgate/rlsclient"
)

const testRules = `
domain: api
rules:
  - name: per-key
    match: {key: "*"}
    count_by: [key]
    limit: 100
    window: 1m
  - name: tokens
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 10000
    window: 1m
    charge_after_response: true
  - name: streams
    match: {stream: "*"}
    count_by: [stream]
    algorithm: concurrency
    limit: 2
`

// These tests run rlsclient, the Go client of floodgate serve, against the
// server itself.

// serve starts `floodgate serve` in this process on loopback ports and
// returns its gRPC and HTTP addresses and a function that stops it.
func serve(t testing.TB) (grpcAddr, httpURL string, stop func()) {
	t.Helper()
	return serveWith(t, nil)
}

// serveWith is serve with the configuration changed by edit (nil: none).
func serveWith(t testing.TB, edit func(*server.Config)) (grpcAddr, httpURL string, stop func()) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.HTTP.Addr, cfg.GRPC.Addr, cfg.Rules = "127.0.0.1:0", "127.0.0.1:0", path
	cfg.ShutdownTimeout = time.Second
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return srv.Addr(server.ListenerGRPC), "http://" + srv.Addr(server.ListenerHTTP), stop
}

func TestAllowAgainstServer(t *testing.T) {
	addr, _, _ := serve(t)
	c, err := rlsclient.New(addr, rlsclient.Options{Domain: "api", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	d, err := c.AllowN(ctx, "acme", 60)
	if err != nil || !d.Allowed || d.Limit != 100 || d.Remaining != 40 || d.ResetAfter <= 0 {
		t.Fatalf("AllowN(60): %+v %v, want allowed, limit 100, 40 remaining", d, err)
	}
	if d, _ = c.Check(ctx, "acme"); !d.Allowed || d.Remaining != 40 {
		t.Fatalf("Check: %+v, want 40 remaining and nothing counted", d)
	}
	if d, _ = c.AllowN(ctx, "acme", 41); d.Allowed || d.Reason == "" || d.RetryAfter <= 0 {
		t.Fatalf("AllowN(41) with 40 left: %+v, want rejected with a RetryAfter", d)
	}
}

// Many goroutines share one connection; the server counts every call once.
// The server runs in this process, so goroutines are told apart by their
// stacks: the client's transport goroutines (one connection reader and its
// writer) must not grow with the calls, whatever the server does.
func TestConcurrentCallsShareOneConnection(t *testing.T) {
	addr, _, _ := serve(t)
	c, _ := rlsclient.New(addr, rlsclient.Options{Domain: "api", Timeout: 5 * time.Second})
	defer c.Close()
	c.Allow(context.Background(), "warm-up")
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 200 {
		wg.Go(func() {
			<-start
			d, err := c.Allow(context.Background(), "shared")
			if err != nil {
				t.Error(err)
			}
			if d.Allowed {
				allowed.Add(1)
			}
		})
	}
	// The watcher samples the goroutines from before the calls start
	// until after they end: without the race detector 200 calls can end
	// before a watcher started beside them first runs.
	stop, sampled := make(chan struct{}), make(chan struct{})
	var conns, transport atomic.Int64
	var watched sync.WaitGroup
	watched.Go(func() {
		buf := make([]byte, 8<<20)
		for first := true; ; first = false {
			stacks := string(buf[:runtime.Stack(buf, true)])
			conns.Store(max(conns.Load(), int64(strings.Count(stacks, "(*http2Client).reader"))))
			n := 0
			for _, g := range strings.Split(stacks, "\n\n") {
				if strings.Contains(g, "http2Client") && !strings.Contains(g, "rlsclient") {
					n++
				}
			}
			transport.Store(max(transport.Load(), int64(n)))
			if first {
				close(sampled)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	<-sampled
	close(start)
	wg.Wait()
	close(stop)
	watched.Wait()
	if allowed.Load() != 100 {
		t.Fatalf("%d of 200 allowed, want exactly the limit, 100", allowed.Load())
	}
	t.Logf("client connections %d, client transport goroutines at most %d", conns.Load(), transport.Load())
	if conns.Load() != 1 {
		t.Errorf("%d client connections seen, want 1 shared by every call", conns.Load())
	}
	if transport.Load() > 4 {
		t.Errorf("%d client transport goroutines while 200 calls ran, want a fixed few", transport.Load())
	}
}

func TestTokenBudgetThroughClient(t *testing.T) {
	addr, _, _ := serve(t)
	c, _ := rlsclient.New(addr, rlsclient.Options{Domain: "api", EntryKey: "tenant", Timeout: 2 * time.Second})
	defer c.Close()
	ctx := context.Background()
	for i, want := range []int64{2000, 0} {
		if d, _ := c.Check(ctx, "acme"); !d.Allowed {
			t.Fatalf("check %d: %+v, want allowed", i, d)
		}
		d, err := c.Charge(ctx, "acme", 8000)
		if err != nil || d.Remaining != want {
			t.Fatalf("charge %d: %+v %v, want %d remaining", i, d, err, want)
		}
	}
	if d, _ := c.Check(ctx, "acme"); d.Allowed {
		t.Fatalf("check in debt: %+v, want rejected", d)
	}
}

func TestReleaseThroughServer(t *testing.T) {
	addr, httpURL, _ := serve(t)
	c, _ := rlsclient.New(addr, rlsclient.Options{Domain: "api", EntryKey: "stream", HTTPURL: httpURL, Timeout: 2 * time.Second})
	defer c.Close()
	ctx := context.Background()
	var leases []*floodgate.Lease
	for i, want := range []bool{true, true, false} {
		l, err := c.Acquire(ctx, "s", 1)
		if err != nil || l.Decision.Allowed != want {
			t.Fatalf("call %d: %+v %v, want allowed %v", i, l, err, want)
		}
		leases = append(leases, l)
	}
	if err := leases[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := leases[0].Release(ctx); !errors.Is(err, floodgate.ErrLeaseNotHeld) {
		t.Fatalf("second release: %v, want ErrLeaseNotHeld", err)
	}
	if d, _ := c.Allow(ctx, "s"); !d.Allowed {
		t.Fatalf("after a release: %+v, want allowed", d)
	}
	if d, _ := c.Allow(ctx, "s"); d.Allowed {
		t.Fatalf("a third slot after one release: %+v", d)
	}
	// The same timeout as c: with the default 100 ms a loaded machine sent
	// the acquire to the failure policy, a lease with nothing to release.
	noHTTP, _ := rlsclient.New(addr, rlsclient.Options{Domain: "api", EntryKey: "stream", Timeout: 2 * time.Second})
	defer noHTTP.Close()
	if err := leases[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := noHTTP.Acquire(ctx, "s", 1)
	if err != nil || !l.Decision.Allowed {
		t.Fatalf("acquire: %+v %v", l, err)
	}
	if err := l.Release(ctx); !errors.Is(err, rlsclient.ErrNoHTTP) {
		t.Fatalf("release without HTTPURL: %v", err)
	}
}

// With the server stopped, the failure policy answers within the deadline.
func TestFailurePolicyWhenServerIsDown(t *testing.T) {
	addr, _, stop := serve(t)
	stop()
	for _, closed := range []bool{false, true} {
		var errs atomic.Int64
		c, _ := rlsclient.New(addr, rlsclient.Options{Domain: "api", Timeout: 200 * time.Millisecond,
			FailClosed: closed, OnError: func(error) { errs.Add(1) }})
		start := time.Now()
		d, err := c.Allow(context.Background(), "acme")
		took := time.Since(start)
		c.Close()
		if err != nil || d.Allowed == closed || errs.Load() != 1 {
			t.Errorf("fail closed %v: %+v %v (%d errors reported)", closed, d, err, errs.Load())
		}
		if closed && d.Reason != algorithm.ReasonStoreUnavailable {
			t.Errorf("reason %q", d.Reason)
		}
		if took > time.Second {
			t.Errorf("fail closed %v: took %v, deadline 200ms", closed, took)
		}
	}
}

// The failure policy is not silent: the outage is logged, once for many
// calls, whichever way the policy decides.
func TestFailurePolicyIsLogged(t *testing.T) {
	addr, _, stop := serve(t)
	stop()
	for _, closed := range []bool{false, true} {
		var logs syncbuf.Buffer
		c, _ := rlsclient.New(addr, rlsclient.Options{Domain: "api", Timeout: 100 * time.Millisecond,
			FailClosed: closed, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		for range 3 {
			c.Allow(context.Background(), "acme")
		}
		c.Close()
		if n := strings.Count(logs.String(), "rate limit server unavailable"); n != 1 {
			t.Errorf("fail closed %v: %d warnings for 3 calls, want 1:\n%s", closed, n, logs.String())
		}
	}
}

// A key no rule matches (here: the wrong domain) is allowed without limit,
// and says so: Limit 0 and a warning, or ErrUnmatched with RequireMatch.
// A key the rules match is neither.
func TestUnmatchedKeyIsNotSilent(t *testing.T) {
	addr, _, _ := serve(t)
	var logs syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	wrong, _ := rlsclient.New(addr, rlsclient.Options{Domain: "apii", Timeout: 2 * time.Second, Logger: logger})
	defer wrong.Close()
	d, err := wrong.Allow(context.Background(), "acme")
	if err != nil || !d.Allowed || d.Limit != 0 || !strings.Contains(logs.String(), "no rule matched") {
		t.Fatalf("unmatched key: %+v, %v, log %q", d, err, logs.String())
	}
	strict, _ := rlsclient.New(addr, rlsclient.Options{Domain: "apii", Timeout: 2 * time.Second, RequireMatch: true, Logger: logger})
	defer strict.Close()
	if _, err := strict.Allow(context.Background(), "acme"); !errors.Is(err, rlsclient.ErrUnmatched) {
		t.Fatalf("unmatched key with RequireMatch: %v", err)
	}
	right, _ := rlsclient.New(addr, rlsclient.Options{Domain: "api", Timeout: 2 * time.Second, RequireMatch: true, Logger: logger})
	defer right.Close()
	if d, err := right.Allow(context.Background(), "acme"); err != nil || d.Limit != 100 {
		t.Fatalf("matched key: %+v, %v", d, err)
	}
}

func TestMalformedRequestIsAnError(t *testing.T) {
	addr, _, _ := serve(t)
	c, _ := rlsclient.New(addr, rlsclient.Options{Domain: "api", EntryKey: "key", Timeout: 2 * time.Second,
		Describe: func(key string) rlsclient.Descriptor { return rlsclient.Descriptor{{Key: "", Value: key}} }})
	defer c.Close()
	if _, err := c.Allow(context.Background(), "acme"); err == nil {
		t.Fatal("an empty entry key was not an error")
	}
	if _, err := rlsclient.New(addr, rlsclient.Options{}); err == nil {
		t.Fatal("a client without a domain was built")
	}
}

// A charge that the server decides as a request, and rejects, is reported.
func TestChargeOnOrdinaryRuleReportsNotCharged(t *testing.T) {
	addr, _, _ := serve(t)
	c, _ := rlsclient.New(addr, rlsclient.Options{Domain: "api", Timeout: 2 * time.Second})
	defer c.Close()
	if _, err := c.Charge(context.Background(), "acme", 60); err != nil {
		t.Fatalf("charge of 60 of 100: %v", err)
	}
	if _, err := c.Charge(context.Background(), "acme", 60); !errors.Is(err, rlsclient.ErrNotCharged) {
		t.Fatalf("charge past the limit of an ordinary rule: %v, want ErrNotCharged", err)
	}
}
