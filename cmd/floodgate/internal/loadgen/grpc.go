package loadgen

import (
	"context"
	"errors"
	"fmt"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// rlsUnmatchedHeader is rls.UnmatchedHeader (the generator does not import
// the server's packages).
const rlsUnmatchedHeader = "floodgate-unmatched"

// shouldRateLimit is the full method name of the RLS call.
const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// grpcCaller calls envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit.
//
// The generator shares the machine with the server it measures, so it does
// as little work per call as it can: each key's RateLimitRequest is encoded
// once, with the generated Envoy types, and sent as bytes; from the answer it
// decodes only overall_code (checking that the whole message is well-formed
// protobuf). The server sees ordinary protobuf messages.
type grpcCaller struct {
	conns []*grpc.ClientConn
	reqs  []encoded
	// hdr[w] receives worker w's response header (floodgate-unmatched);
	// each worker makes one call at a time, so one option each is reused.
	hdr  []metadata.MD
	opts [][]grpc.CallOption
}

// encoded is a message already in wire format.
type encoded []byte

// overallCode receives a RateLimitResponse's overall_code.
type overallCode struct{ code rls.RateLimitResponse_Code }

// wireCodec sends encoded messages as they are and decodes answers into
// overallCode. It is used only on the generator's own connections.
type wireCodec struct{}

func (wireCodec) Name() string { return "proto" }

func (wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(encoded)
	if !ok {
		return nil, fmt.Errorf("loadgen codec: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	oc, ok := v.(*overallCode)
	if !ok {
		return fmt.Errorf("loadgen codec: cannot unmarshal into %T", v)
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		b = data.Materialize()
	}
	oc.code = rls.RateLimitResponse_UNKNOWN
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("malformed RateLimitResponse: %v", protowire.ParseError(n))
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("malformed RateLimitResponse overall_code: %v", protowire.ParseError(n))
			}
			oc.code = rls.RateLimitResponse_Code(v)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return fmt.Errorf("malformed RateLimitResponse field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

func newGRPCCaller(c *Config, host string) (*grpcCaller, error) {
	g := &grpcCaller{}
	for range c.Conns {
		cc, err := grpc.NewClient("passthrough:///"+host,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(wireCodec{})))
		if err != nil {
			g.close()
			return nil, fmt.Errorf("grpc target %s: %v", host, err)
		}
		g.conns = append(g.conns, cc)
	}
	g.hdr = make([]metadata.MD, c.Concurrency)
	g.opts = make([][]grpc.CallOption, c.Concurrency)
	for w := range g.opts {
		g.opts[w] = []grpc.CallOption{grpc.Header(&g.hdr[w])}
	}
	g.reqs = make([]encoded, c.Keys)
	for k := range c.Keys {
		req := &rls.RateLimitRequest{Domain: c.Domain, HitsAddend: c.Hits}
		for _, d := range c.descriptorsFor(k) {
			pd := &commonrl.RateLimitDescriptor{}
			for _, e := range d {
				pd.Entries = append(pd.Entries, &commonrl.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
			}
			req.Descriptors = append(req.Descriptors, pd)
		}
		b, err := proto.Marshal(req)
		if err != nil {
			g.close()
			return nil, fmt.Errorf("encoding request: %v", err)
		}
		g.reqs[k] = b
	}
	return g, nil
}

var errUnknownCode = errors.New("overall_code UNKNOWN (the server must answer OK or OVER_LIMIT)")

func (g *grpcCaller) call(ctx context.Context, worker, key int) (Outcome, error) {
	var oc overallCode
	if err := g.conns[worker%len(g.conns)].Invoke(ctx, shouldRateLimit, g.reqs[key], &oc, g.opts[worker]...); err != nil {
		return Failed, err
	}
	switch oc.code {
	case rls.RateLimitResponse_OK:
		if len(g.hdr[worker][rlsUnmatchedHeader]) > 0 {
			return Unmatched, nil
		}
		return Allowed, nil
	case rls.RateLimitResponse_OVER_LIMIT:
		return OverLimit, nil
	case rls.RateLimitResponse_UNKNOWN:
		return Failed, errUnknownCode
	default:
		return Failed, fmt.Errorf("overall_code %v", oc.code)
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
