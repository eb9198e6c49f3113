package gateway

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/ratelog"
	"github.com/floodgate-dev/floodgate/internal/testkit/syncbuf"
)

// closedPort returns the address of a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestGatewayFailuresLoggedSparingly: 200 requests to an upstream that is
// down and 200 requests their clients cancel while the upstream thinks.
// The failures are counted and logged in one record; the cancels are
// counted as cancels and not logged as upstream failures.
func TestGatewayFailuresLoggedSparingly(t *testing.T) {
	const n = 200
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	arrived := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then the server notices when the gateway hangs up
		arrived <- struct{}{}
		<-r.Context().Done() // until the gateway gives up on it
	}))
	t.Cleanup(slow.Close)
	gw, err := New(Options{Logger: log, Routes: []Route{
		{Prefix: "/down/", Upstream: mustURL(t, "http://"+closedPort(t))},
		{Prefix: "/slow/", Upstream: mustURL(t, slow.URL)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.CloseIdleConnections()
	for _, rt := range gw.routes { // however long the test takes: one record
		rt.failures = ratelog.New(time.Hour)
	}
	for _, method := range []string{"GET", "POST"} { // direct forwarder and ReverseProxy
		for range n / 2 {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(method, "http://gw/down/x", nil)
			if method == "POST" {
				req = httptest.NewRequest(method, "http://gw/down/x", strings.NewReader("body"))
			}
			gw.ServeHTTP(rec, req)
			if rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), "upstream for /down/ failed") {
				t.Fatalf("%s to a down upstream: %d, want 502", method, rec.Code)
			}
		}
		for range n / 2 {
			ctx, cancel := context.WithCancel(context.Background())
			req := httptest.NewRequestWithContext(ctx, method, "http://gw/slow/x", nil)
			if method == "POST" {
				req = httptest.NewRequestWithContext(ctx, method, "http://gw/slow/x", strings.NewReader("body"))
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				gw.ServeHTTP(httptest.NewRecorder(), req)
			}()
			<-arrived
			cancel()
			<-done
		}
	}
	out := logs.String()
	lines := strings.Count(out, "\n")
	t.Logf("%d log lines, %d bytes for %d failed and %d cancelled requests", lines, len(out), n, n)
	if got := strings.Count(out, "upstream failed"); got != 1 || !strings.Contains(out, "failures_since_last_record=1") {
		t.Errorf("%d records of upstream failures for %d failures, want 1:\n%s", got, n, clipLog(out))
	}
	if strings.Contains(out, "route=/slow/") || strings.Contains(out, "context canceled") {
		t.Errorf("client cancels logged:\n%s", clipLog(out))
	}
	for _, u := range gw.Upstreams() {
		switch u.Prefix {
		case "/down/":
			if u.Failed != n || u.Canceled != 0 {
				t.Errorf("route /down/: %d failed, %d cancelled, want %d failed", u.Failed, u.Canceled, n)
			}
		case "/slow/":
			if u.Failed != 0 || u.Canceled != n {
				t.Errorf("route /slow/: %d failed, %d cancelled, want %d cancelled", u.Failed, u.Canceled, n)
			}
		}
	}
}

func clipLog(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "..."
	}
	return s
}
