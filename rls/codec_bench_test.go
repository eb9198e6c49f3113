package rls

import (
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// BenchmarkDecodeRequest compares decoding a typical RateLimitRequest (one
// descriptor, two entries) with gRPC's standard proto codec and with the
// codec ServerOption installs, for a valid request (both take the standard
// path) and for one whose value is not UTF-8 (the standard codec fails, the
// server's decodes it by hand).
func BenchmarkDecodeRequest(b *testing.B) {
	valid, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
		desc("client", "acme", "path", "/loan/list")}})
	if err != nil {
		b.Fatal(err)
	}
	invalid := rawRequest("edge", "client", "acme\xff")
	std := encoding.GetCodecV2("proto")
	server := bytesCodec{std: std}
	for _, bc := range []struct {
		name  string
		codec encoding.CodecV2
		data  []byte
	}{
		{"valid/standard", std, valid},
		{"valid/server", server, valid},
		{"invalid-utf8/server", server, invalid},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var req rlsv3.RateLimitRequest
				if err := bc.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bc.data)}, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
