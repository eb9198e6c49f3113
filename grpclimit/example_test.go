package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/grpclimit"
)

// A gRPC service protected by one interceptor: two calls a minute per
// method and client address.
func Example() {
	lim, _ := floodgate.New(floodgate.Limit{Limit: 2, Window: time.Minute})
	srv := grpc.NewServer(grpc.UnaryInterceptor(grpclimit.Unary(lim, nil)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for range 3 {
		_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
		delay, _ := grpclimit.RetryDelay(err)
		fmt.Println(status.Code(err), delay > 0)
	}
	// Output:
	// OK false
	// OK false
	// ResourceExhausted true
}
