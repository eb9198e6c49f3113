package grpclimit_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/grpclimit"
)

// retryServiceConfig is what a stock grpc-go client is given to retry
// RESOURCE_EXHAUSTED by itself; the server's grpc-retry-pushback-ms then
// sets the wait instead of the client's backoff (here 10 s, far longer).
const retryServiceConfig = `{"methodConfig": [{
  "name": [{"service": "grpc.health.v1.Health"}],
  "retryPolicy": {
    "maxAttempts": 4,
    "initialBackoff": "10s",
    "maxBackoff": "10s",
    "backoffMultiplier": 1,
    "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]
  }
}]}`

// attempt is one call as the server saw it: when it arrived, and the
// pushback trailer it was answered with ("" when allowed).
type attempt struct {
	at       time.Time
	pushback string
}

// recordAttempts is a server interceptor, outside the limiter's, that notes
// every attempt and the trailer the limiter set on it.
type recordAttempts struct {
	mu  sync.Mutex
	all []attempt
}

func (r *recordAttempts) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	at := time.Now()
	ts := &trailerSpy{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	resp, err := h(grpc.NewContextWithServerTransportStream(ctx, ts), req)
	r.mu.Lock()
	r.all = append(r.all, attempt{at, ts.pushback})
	r.mu.Unlock()
	return resp, err
}

// trailerSpy passes trailers on and keeps the pushback one.
type trailerSpy struct {
	grpc.ServerTransportStream
	pushback string
}

func (s *trailerSpy) SetTrailer(md metadata.MD) error {
	if v := md.Get("grpc-retry-pushback-ms"); len(v) > 0 {
		s.pushback = v[0]
	}
	return s.ServerTransportStream.SetTrailer(md)
}

// TestStockClientRetriesAfterPushback shows a grpc-go client with nothing
// but a retry policy in its service config waiting out a rejection by
// itself: the call the application makes succeeds, the server saw the
// rejected attempt and then the retry, and the retry came no sooner than
// the pushback said (and long before the policy's own 10 s backoff).
func TestStockClientRetriesAfterPushback(t *testing.T) {
	lim, err := floodgate.New(floodgate.Limit{Limit: 1, Window: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordAttempts{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(rec.unary, grpclimit.Unary(lim, grpclimit.KeyByPeer())))
	healthpb.RegisterHealthServer(g, health.NewServer())
	go g.Serve(lis)
	t.Cleanup(g.Stop)

	dial := func(opts ...grpc.DialOption) healthpb.HealthClient {
		conn, err := grpc.NewClient(lis.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return healthpb.NewHealthClient(conn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()

	// Without a retry policy the rejection reaches the application, with
	// the trailer.
	plain := dial()
	if _, err := plain.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("first call: %v", err)
	}
	var trl metadata.MD
	_, err = plain.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trl))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call in the window: %v, want ResourceExhausted", err)
	}
	ms, perr := strconv.Atoi(first(trl.Get("grpc-retry-pushback-ms")))
	if perr != nil || ms <= 0 || ms > 300 {
		t.Fatalf("grpc-retry-pushback-ms %q, want 1..300 (trailer %v)", trl.Get("grpc-retry-pushback-ms"), trl)
	}

	// The same rejection, for a client with the retry policy: the
	// application's one call succeeds.
	retrying := dial(grpc.WithDefaultServiceConfig(retryServiceConfig))
	rec.mu.Lock()
	rec.all = nil
	rec.mu.Unlock()
	if _, err := retrying.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("call with the retry policy: %v", err)
	}
	rec.mu.Lock()
	all := rec.all
	rec.mu.Unlock()
	if len(all) < 2 || all[len(all)-1].pushback != "" {
		t.Fatalf("attempts %+v: want rejected ones, then the allowed retry", all)
	}
	for i := 1; i < len(all); i++ {
		wait, err := strconv.Atoi(all[i-1].pushback)
		if err != nil {
			t.Fatalf("attempt %d rejected without a pushback: %+v", i-1, all)
		}
		if gap := all[i].at.Sub(all[i-1].at); gap < time.Duration(wait)*time.Millisecond {
			t.Errorf("attempt %d came %v after a pushback of %d ms", i, gap, wait)
		} else {
			t.Logf("attempt %d: pushback %d ms, retried after %v", i, wait, gap.Round(time.Millisecond))
		}
	}
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
