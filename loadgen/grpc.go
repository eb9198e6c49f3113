package loadgen

import (
	"context"
	"fmt"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// grpcCaller calls envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit.
// Requests are built once per key number, so a call allocates only what gRPC
// itself does.
type grpcCaller struct {
	conns   []*grpc.ClientConn
	clients []rls.RateLimitServiceClient
	reqs    []*rls.RateLimitRequest
}

func newGRPCCaller(c *Config, host string) (*grpcCaller, error) {
	g := &grpcCaller{}
	for range c.Conns {
		cc, err := grpc.NewClient("passthrough:///"+host,
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			g.close()
			return nil, fmt.Errorf("grpc target %s: %v", host, err)
		}
		g.conns = append(g.conns, cc)
		g.clients = append(g.clients, rls.NewRateLimitServiceClient(cc))
	}
	g.reqs = make([]*rls.RateLimitRequest, c.Keys)
	for k := range c.Keys {
		req := &rls.RateLimitRequest{Domain: c.Domain, HitsAddend: c.Hits}
		for _, d := range c.descriptorsFor(k) {
			pd := &commonrl.RateLimitDescriptor{}
			for _, e := range d {
				pd.Entries = append(pd.Entries, &commonrl.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
			}
			req.Descriptors = append(req.Descriptors, pd)
		}
		g.reqs[k] = req
	}
	return g, nil
}

func (g *grpcCaller) call(ctx context.Context, worker, key int) (Outcome, error) {
	resp, err := g.clients[worker%len(g.clients)].ShouldRateLimit(ctx, g.reqs[key])
	if err != nil {
		return Failed, err
	}
	switch resp.GetOverallCode() {
	case rls.RateLimitResponse_OK:
		return Allowed, nil
	case rls.RateLimitResponse_OVER_LIMIT:
		return OverLimit, nil
	default:
		return Failed, fmt.Errorf("overall_code %v", resp.GetOverallCode())
	}
}

func (g *grpcCaller) close() error {
	var first error
	for _, cc := range g.conns {
		if err := cc.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
