package grpclimit_test

import (
	"context"
	"net"
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
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/grpclimit"
)

// serveHealth serves the gRPC health service on a loopback port with the
// given server options and returns a client connection to it.
func serveHealth(t testing.TB, clientOpts []grpc.DialOption, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(),
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, clientOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestUnaryRejectsWithRetryInfo(t *testing.T) {
	lim, _ := floodgate.New(floodgate.Limit{Limit: 2, Window: time.Minute})
	conn := serveHealth(t, nil, grpc.UnaryInterceptor(grpclimit.Unary(lim, nil)))
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	for i := range 3 {
		var hdr, trl metadata.MD
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
		md := metadata.Join(hdr, trl)
		if got := md.Get("x-ratelimit-limit"); len(got) == 0 || got[0] != "2" {
			t.Errorf("call %d: x-ratelimit-limit %v, want 2 (metadata %v)", i, got, md)
		}
		if i < 2 {
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			continue
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("call 3: %v, want ResourceExhausted", err)
		}
		d, ok := grpclimit.RetryDelay(err)
		if !ok || d < 50*time.Second || d > time.Minute {
			t.Fatalf("RetryInfo %v %v, want about a minute", d, ok)
		}
		if got := md.Get("retry-after"); len(got) == 0 {
			t.Errorf("no retry-after metadata: %v", md)
		}
	}
}

func TestStreamIsDecidedWhenItOpens(t *testing.T) {
	lim, _ := floodgate.New(floodgate.Limit{Limit: 1, Window: time.Minute})
	conn := serveHealth(t, nil, grpc.StreamInterceptor(grpclimit.Stream(lim, nil)))
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	second, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted", err)
	}
}

func TestKeyByMetadata(t *testing.T) {
	lim, _ := floodgate.New(floodgate.Limit{Limit: 1, Window: time.Minute})
	conn := serveHealth(t, nil, grpc.UnaryInterceptor(grpclimit.Unary(lim, grpclimit.KeyByMetadata("x-api-key"))))
	hc := healthpb.NewHealthClient(conn)
	call := func(key string) error {
		ctx := context.Background()
		if key != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
		}
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	for _, c := range []struct {
		key  string
		want codes.Code
	}{{"acme", codes.OK}, {"globex", codes.OK}, {"acme", codes.ResourceExhausted}, {"", codes.InvalidArgument}} {
		if got := status.Code(call(c.key)); got != c.want {
			t.Errorf("key %q: %v, want %v", c.key, got, c.want)
		}
	}
}

// The client interceptor waits out RetryInfo when the retry fits in the
// deadline, and gives up at once when it does not.
func TestWaitRetryWithinDeadline(t *testing.T) {
	// A sliding limit: with a fixed window aligned to the clock, a first
	// call late in one window let the second through in the next.
	lim, _ := floodgate.New(floodgate.Limit{Algorithm: algorithm.BoundedLog, Limit: 1, Window: 300 * time.Millisecond})
	conn := serveHealth(t, []grpc.DialOption{grpc.WithUnaryInterceptor(grpclimit.WaitRetry(3))},
		grpc.UnaryInterceptor(grpclimit.Unary(lim, nil)))
	hc := healthpb.NewHealthClient(conn)
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	// ResourceExhausted, not DeadlineExceeded: it did not wait.
	if _, err := hc.Check(short, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("with a 20ms deadline: %v, want ResourceExhausted at once", err)
	}
	long, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	start := time.Now()
	if _, err := hc.Check(long, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("with a 2s deadline: %v, want success after waiting", err)
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("took %v, want about the window (300ms)", took)
	}
}

// A concurrency limiter gets its unit back when each call ends.
func TestConcurrencyReleasedWhenCallEnds(t *testing.T) {
	lim, _ := floodgate.New(floodgate.Limit{Algorithm: algorithm.Concurrency, Limit: 1})
	conn := serveHealth(t, nil, grpc.UnaryInterceptor(grpclimit.Unary(lim, nil)))
	hc := healthpb.NewHealthClient(conn)
	for i := range 5 {
		if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d of one at a time on a concurrency limit of 1: %v", i, err)
		}
	}
}

type down struct{}

func (down) Allow(context.Context, string) (algorithm.Decision, error) {
	return algorithm.Decision{}, context.DeadlineExceeded
}

func TestServerFailurePolicy(t *testing.T) {
	for _, closed := range []bool{false, true} {
		u, _, err := grpclimit.NewServerInterceptors(grpclimit.Options{Limiter: down{}, FailClosed: closed})
		if err != nil {
			t.Fatal(err)
		}
		conn := serveHealth(t, nil, grpc.UnaryInterceptor(u))
		_, err = healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		want := codes.OK
		if closed {
			want = codes.Unavailable
		}
		if status.Code(err) != want {
			t.Errorf("fail closed %v: %v, want %v", closed, err, want)
		}
	}
	if _, _, err := grpclimit.NewServerInterceptors(grpclimit.Options{}); err == nil {
		t.Fatal("nil limiter accepted")
	}
}
