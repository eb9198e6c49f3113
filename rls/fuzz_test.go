package rls

import (
	"context"
	"io"
	"log/slog"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

// FuzzShouldRateLimit decodes arbitrary bytes as a RateLimitRequest (any
// domain, descriptors, entries and hits_addend values) and asks the service.
// The answer is INVALID_ARGUMENT or a decision with one status per
// descriptor and an overall code of OK or OVER_LIMIT that agrees with them;
// never a panic, never UNAVAILABLE on an in-memory store. The bytes are
// decoded as the server decodes them (ServerOption), so strings that are
// not UTF-8 reach the service too.
func FuzzShouldRateLimit(f *testing.F) {
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		f.Fatal(err)
	}
	svc := New(rules.NewEngine(set, memstore.New(memstore.Options{})), slog.New(slog.NewTextHandler(io.Discard, nil)))

	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "acme")}},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "acme"), desc("path", "/loan/1")}, HitsAddend: 2},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: desc("client", "a").Entries, HitsAddend: wrapperspb.UInt64(5)},
			desc("member", "m"),
		}},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: desc("client", "a").Entries, HitsAddend: wrapperspb.UInt64(1 << 63)}}},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "a")}, HitsAddend: 1<<32 - 1},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("", "x")}},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{}}},
		{Domain: "edge"},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
			withLimit(2, typev3.RateLimitUnit_MINUTE, wrapperspb.UInt32(3), "client", "a"),
			{Entries: desc("path", "/loan/1").Entries, HitsAddend: wrapperspb.UInt64(2)},
		}},
		{Domain: "", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "a")}},
		{Domain: "other", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "a", "path", "/loan/x")}},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff})
	// Strings that are not UTF-8, which proto.Marshal would refuse to write.
	f.Add(rawRequest("edge", "client", "J\xff"))
	f.Add(rawRequest("ed\xc0ge", "cli\xfeent", "\xed\xa0\x80"))
	f.Add(append(rawRequest("edge", "path", "/loan/\x80"), 0x18, 0x02)) // and hits_addend 2

	codec := bytesCodec{std: encoding.GetCodecV2("proto")}
	f.Fuzz(func(t *testing.T, data []byte) {
		var in rlsv3.RateLimitRequest
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &in); err != nil {
			return // not a request gRPC would deliver
		}
		// Where the standard decoder accepts the bytes, the bytes decoder
		// reads the same request.
		var std, hand rlsv3.RateLimitRequest
		if proto.Unmarshal(data, &std) == nil {
			if err := decodeRequest(data, &hand); err != nil || !proto.Equal(&std, &hand) {
				t.Fatalf("decoders disagree on %x: standard %v, bytes %v (%v)", data, &std, &hand, err)
			}
		}
		resp, err := svc.ShouldRateLimit(context.Background(), &in)
		if err != nil {
			st, ok := status.FromError(err)
			if !ok || st.Code() != codes.InvalidArgument {
				t.Fatalf("error %v for %v, want INVALID_ARGUMENT or a decision", err, &in)
			}
			if st.Message() == "" {
				t.Fatalf("INVALID_ARGUMENT without a message for %v", &in)
			}
			return
		}
		if in.GetDomain() == "" || len(in.GetDescriptors()) == 0 {
			t.Fatalf("decided a request with no domain or no descriptors: %v", &in)
		}
		if len(resp.GetStatuses()) != len(in.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(in.GetDescriptors()))
		}
		over := false
		for i, s := range resp.GetStatuses() {
			switch s.GetCode() {
			case rlsv3.RateLimitResponse_OK:
			case rlsv3.RateLimitResponse_OVER_LIMIT:
				over = true
			default:
				t.Fatalf("descriptor %d: code %v", i, s.GetCode())
			}
		}
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT:
		default:
			t.Fatalf("overall code %v", resp.GetOverallCode())
		}
		if over && resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("a descriptor is over the limit but the overall code is %v", resp.GetOverallCode())
		}
	})
}

// rawRequest encodes a RateLimitRequest with one descriptor of one entry
// by hand, so its strings may be any bytes.
func rawRequest(domain, key, value string) []byte {
	var entry, d, req []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, key)
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendString(entry, value)
	d = protowire.AppendTag(d, 1, protowire.BytesType)
	d = protowire.AppendBytes(d, entry)
	req = protowire.AppendTag(req, 1, protowire.BytesType)
	req = protowire.AppendString(req, domain)
	req = protowire.AppendTag(req, 2, protowire.BytesType)
	return protowire.AppendBytes(req, d)
}
