// Command nullrls is an Envoy Rate Limit Service that answers every call
// OK without deciding anything: the baseline BENCHMARKS.md ("The server")
// compares `floodgate serve` with, to show what gRPC, the load generator
// and the machine cost on their own. It listens on 127.0.0.1:8081 (or the
// address given as its one argument) with the same gRPC settings as
// `floodgate serve`.
package main

import (
	"context"
	"log"
	"net"
	"os"
	"runtime"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

type okService struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// ShouldRateLimit answers OK with one OK status per descriptor.
func (okService) ShouldRateLimit(_ context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range in.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return resp, nil
}

func main() {
	addr := "127.0.0.1:8081"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer(grpc.NumStreamWorkers(uint32(32 * runtime.GOMAXPROCS(0))))
	rlsv3.RegisterRateLimitServiceServer(g, okService{})
	log.Fatal(g.Serve(ln))
}
