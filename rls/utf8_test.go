package rls

import (
	"context"
	"net"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

// rawBytes is a request already encoded, sent as is.
type rawBytes []byte

// rawCodec sends rawBytes unchanged and decodes answers as usual, as an
// Envoy would send strings made of request bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(rawBytes))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}

func (rawCodec) Name() string { return "proto" }

// rawCall sends an encoded RateLimitRequest to the server at addr.
func rawCall(t *testing.T, conn *grpc.ClientConn, req []byte) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	var resp rlsv3.RateLimitResponse
	err := conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
		rawBytes(req), &resp, grpc.ForceCodecV2(rawCodec{}))
	return &resp, err
}

// serveRaw starts a real gRPC server with opts and connects to it.
func serveRaw(t *testing.T, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	New(rules.NewEngine(set, memstore.New(memstore.Options{})), nil).Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestInvalidUTF8Decided: over a real gRPC connection, descriptor values
// that are not UTF-8 are decided, each counted by its exact bytes: J\xff
// reaches its limit of 3 while J\xfe still has its own. Without
// ServerOption the same call fails with INTERNAL, no decision made.
func TestInvalidUTF8Decided(t *testing.T) {
	plain := serveRaw(t)
	if _, err := rawCall(t, plain, rawRequest("edge", "client", "J\xff")); status.Code(err) != codes.Internal {
		t.Fatalf("standard codec: %v, want INTERNAL (the failure ServerOption exists for)", err)
	}

	conn := serveRaw(t, ServerOption())
	for i := 1; i <= 4; i++ {
		resp, err := rawCall(t, conn, rawRequest("edge", "client", "J\xff"))
		if err != nil {
			t.Fatalf("call %d for J\\xff: %v", i, err)
		}
		want := rlsv3.RateLimitResponse_OK
		if i == 4 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if resp.OverallCode != want || resp.Statuses[0].GetCurrentLimit().GetName() != "per-client" {
			t.Fatalf("call %d for J\\xff: %v, want %v from per-client", i, resp, want)
		}
	}
	for _, v := range []string{"J\xfe", "J\uFFFD", "J"} {
		resp, err := rawCall(t, conn, rawRequest("edge", "client", v))
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 {
			t.Fatalf("first call for %q after J\\xff's four: %v %v, want OK with 2 remaining (its own counter)", v, resp, err)
		}
	}
	// A key and a domain that are not UTF-8 are decided too: no rule
	// matches them, so the answer is OK.
	if resp, err := rawCall(t, conn, rawRequest("ed\xffge", "cl\xc0ient", "x")); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("domain and key not UTF-8: %v %v", resp, err)
	}
	// Bytes that are not a protobuf message are still refused.
	if _, err := rawCall(t, conn, []byte{0x0a, 0xff}); status.Code(err) != codes.Internal {
		t.Fatalf("malformed message: %v, want INTERNAL", err)
	}
}
