package loadgen

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator/gubernatorpb"
)

// getRateLimits is the full method name of gubernator's call.
const getRateLimits = "/pb.gubernator.V1/GetRateLimits"

// The limit every gubernator call asks for: 1000 hits a second per key
// (a token bucket), so that most answers are UNDER_LIMIT.
const (
	gubernatorLimit    = 1000
	gubernatorDuration = 1000 // ms
)

// gubernatorCaller calls gubernator's V1/GetRateLimits (on gubernator or
// on `floodgate serve`) with one rate limit request per call, named "load"
// with unique_key key-N. As grpcCaller does, it encodes each key's
// request once and reads only what it counts from the answer.
type gubernatorCaller struct {
	conns []*grpc.ClientConn
	reqs  []encoded
}

// gubernatorAnswer receives the first answer's status and error.
type gubernatorAnswer struct {
	over bool
	err  string
}

// gubernatorCodec sends encoded requests and decodes GetRateLimitsResp
// into gubernatorAnswer.
type gubernatorCodec struct{}

func (gubernatorCodec) Name() string { return "proto" }

func (gubernatorCodec) Marshal(v any) (mem.BufferSlice, error) { return wireCodec{}.Marshal(v) }

func (gubernatorCodec) Unmarshal(data mem.BufferSlice, v any) error {
	a, ok := v.(*gubernatorAnswer)
	if !ok {
		return fmt.Errorf("loadgen codec: cannot unmarshal into %T", v)
	}
	var resp gubernatorpb.GetRateLimitsResp
	if err := proto.Unmarshal(data.Materialize(), &resp); err != nil {
		return fmt.Errorf("malformed GetRateLimitsResp: %v", err)
	}
	if len(resp.Responses) != 1 {
		return fmt.Errorf("GetRateLimitsResp holds %d answers for 1 request", len(resp.Responses))
	}
	a.over = resp.Responses[0].Status == gubernatorpb.Status_OVER_LIMIT
	a.err = resp.Responses[0].Error
	return nil
}

func newGubernatorCaller(c *Config, host string) (*gubernatorCaller, error) {
	g := &gubernatorCaller{}
	for range c.Conns {
		cc, err := grpc.NewClient("passthrough:///"+host,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(gubernatorCodec{})))
		if err != nil {
			g.close()
			return nil, fmt.Errorf("gubernator target %s: %v", host, err)
		}
		g.conns = append(g.conns, cc)
	}
	hits := int64(c.Hits)
	if hits == 0 {
		hits = 1
	}
	g.reqs = make([]encoded, c.Keys)
	for k := range c.Keys {
		b, err := proto.Marshal(&gubernatorpb.GetRateLimitsReq{Requests: []*gubernatorpb.RateLimitReq{{
			Name: "load", UniqueKey: fmt.Sprintf("key-%d", k), Hits: hits, Limit: gubernatorLimit, Duration: gubernatorDuration}}})
		if err != nil {
			g.close()
			return nil, fmt.Errorf("encoding request: %v", err)
		}
		g.reqs[k] = b
	}
	return g, nil
}

func (g *gubernatorCaller) call(ctx context.Context, worker, key int) (Outcome, error) {
	var a gubernatorAnswer
	if err := g.conns[worker%len(g.conns)].Invoke(ctx, getRateLimits, g.reqs[key], &a); err != nil {
		return Failed, err
	}
	switch {
	case a.err != "":
		return Failed, errors.New(a.err)
	case a.over:
		return OverLimit, nil
	}
	return Allowed, nil
}

func (g *gubernatorCaller) close() error {
	var first error
	for _, cc := range g.conns {
		if err := cc.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
