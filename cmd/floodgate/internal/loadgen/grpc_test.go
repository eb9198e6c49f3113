package loadgen

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestWireCodecReadsOverallCode decodes full responses, as a server sends
// them (statuses, headers), and checks only overall_code is taken from them
// and malformed bytes are refused.
func TestWireCodecReadsOverallCode(t *testing.T) {
	for _, code := range []rls.RateLimitResponse_Code{rls.RateLimitResponse_OK, rls.RateLimitResponse_OVER_LIMIT, rls.RateLimitResponse_UNKNOWN} {
		resp := &rls.RateLimitResponse{
			Statuses: []*rls.RateLimitResponse_DescriptorStatus{{
				Code:               code,
				CurrentLimit:       &rls.RateLimitResponse_RateLimit{Name: "per-client", RequestsPerUnit: 600, Unit: rls.RateLimitResponse_RateLimit_MINUTE},
				LimitRemaining:     12,
				DurationUntilReset: durationpb.New(30e9),
			}},
			ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "RateLimit", Value: `"per-client";r=12;t=30`}},
			OverallCode:          code,
		}
		b, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		// Split the bytes in two buffers, as gRPC may hand them over.
		data := mem.BufferSlice{mem.SliceBuffer(b[:len(b)/2]), mem.SliceBuffer(b[len(b)/2:])}
		var oc overallCode
		if err := (wireCodec{}).Unmarshal(data, &oc); err != nil {
			t.Fatalf("%v: %v", code, err)
		}
		if oc.code != code {
			t.Errorf("decoded %v, want %v", oc.code, code)
		}
	}
	var oc overallCode
	if err := (wireCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x08})}, &oc); err == nil {
		t.Error("truncated varint accepted")
	}
	if err := (wireCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x12, 0x05, 0x01})}, &oc); err == nil {
		t.Error("truncated length-delimited field accepted")
	}
	if _, err := (wireCodec{}).Marshal(&rls.RateLimitRequest{}); err == nil {
		t.Error("codec marshalled a message that is not pre-encoded")
	}
}

// TestWireCodecRequestIsValidProto checks that what the generator sends is the
// RateLimitRequest it means, by decoding it with the generated type.
func TestWireCodecRequestIsValidProto(t *testing.T) {
	cfg := Config{Target: "grpc://127.0.0.1:1", Keys: 3, Domain: "edge", Hits: 2,
		Descriptors: []Descriptor{{{Key: "client", Value: "c"}}, {{Key: "path", Value: "/x"}}}}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	g, err := newGRPCCaller(&cfg, "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	var req rls.RateLimitRequest
	if err := proto.Unmarshal(g.reqs[2], &req); err != nil {
		t.Fatal(err)
	}
	if req.Domain != "edge" || req.HitsAddend != 2 || len(req.Descriptors) != 2 ||
		req.Descriptors[0].Entries[0].Value != "c2" || req.Descriptors[1].Entries[0].Value != "/x" {
		t.Errorf("request %v", &req)
	}
}
