package rls

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

const testRules = `
domain: edge
rules:
  - name: per-client
    match: {client: "*"}
    count_by: [client]
    limit: 3
    window: 1m
    algorithm: fixed-window
  - name: per-path
    match: {path: {prefix: /loan/}}
    count_by: [path]
    limit: 100
    window: 90s
    algorithm: fixed-window
  - name: dark
    match: {member: "*"}
    count_by: [member]
    limit: 1
    window: 1h
    shadow: true
`

// dial starts a real gRPC server on a 127.0.0.1 port and returns a client
// connected to it.
func dial(t *testing.T, opts ...Option) (rlsv3.RateLimitServiceClient, healthpb.HealthClient) {
	t.Helper()
	conn := dialConn(t, opts...)
	return rlsv3.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn)
}

// dialConn is dial's connection.
func dialConn(t *testing.T, opts ...Option) *grpc.ClientConn {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	eng := rules.NewEngine(set, memstore.New(memstore.Options{}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(ServerOption())
	New(eng, nil, opts...).Register(g)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestShouldRateLimit(t *testing.T) {
	c, _ := dial(t, WithHeaders())
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
		desc("client", "acme"), desc("path", "/loan/list"), desc("path", "/catalog/search"),
	}}
	for i := 0; i < 3; i++ {
		resp, err := c.ShouldRateLimit(ctx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d: overall %v, want OK", i, resp.OverallCode)
		}
		if len(resp.Statuses) != 3 {
			t.Fatalf("%d statuses for 3 descriptors", len(resp.Statuses))
		}
		s := resp.Statuses[0]
		if s.Code != rlsv3.RateLimitResponse_OK || s.LimitRemaining != uint32(2-i) ||
			s.CurrentLimit.GetName() != "per-client" || s.CurrentLimit.GetRequestsPerUnit() != 3 ||
			s.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || s.CurrentLimit.GetUnitMultiplier() != nil {
			t.Fatalf("call %d: client status %v", i, s)
		}
		if d := s.DurationUntilReset.AsDuration(); d <= 0 || d > time.Minute {
			t.Fatalf("duration_until_reset %v", d)
		}
		p := resp.Statuses[1]
		if p.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || p.CurrentLimit.GetUnitMultiplier().GetValue() != 90 ||
			p.CurrentLimit.GetRequestsPerUnit() != 100 {
			t.Fatalf("90s window expressed as %v", p.CurrentLimit)
		}
		if u := resp.Statuses[2]; u.Code != rlsv3.RateLimitResponse_OK || u.CurrentLimit != nil {
			t.Fatalf("unlimited descriptor status %v", u)
		}
	}
	resp, err := c.ShouldRateLimit(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.Statuses[1].Code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("4th call: %v", resp)
	}
	hdr := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		hdr[h.Key] = h.Value
	}
	if hdr["Retry-After"] == "" || hdr["X-RateLimit-Limit"] != "3" || hdr["X-RateLimit-Remaining"] != "0" ||
		!strings.Contains(hdr["RateLimit-Policy"], `"per-client";q=3;w=60`) || !strings.Contains(hdr["RateLimit-Policy"], `"per-path";q=100;w=90`) ||
		!strings.Contains(hdr["RateLimit"], `"per-client";r=0;t=`) {
		t.Fatalf("response_headers_to_add %v", hdr)
	}
}

func TestHitsAddend(t *testing.T) {
	c, _ := dial(t)
	// Request-wide hits_addend 2: 2 of 3 used.
	resp, err := c.ShouldRateLimit(ctx(t), &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 2,
		Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "a")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("after hits_addend 2: remaining %d, want 1", resp.Statuses[0].LimitRemaining)
	}
	// hits_addend 0 means 1.
	resp, _ = c.ShouldRateLimit(ctx(t), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "b")}})
	if resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("after hits_addend 0: remaining %d, want 2", resp.Statuses[0].LimitRemaining)
	}
	// A descriptor's own hits_addend overrides the request's.
	d := desc("client", "c")
	d.HitsAddend = wrapperspb.UInt64(3)
	resp, _ = c.ShouldRateLimit(ctx(t), &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1,
		Descriptors: []*commonv3.RateLimitDescriptor{d, desc("client", "e")}})
	if resp.Statuses[0].LimitRemaining != 0 || resp.Statuses[1].LimitRemaining != 2 || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("per-descriptor hits: %v", resp.Statuses)
	}
	d.HitsAddend = wrapperspb.UInt64(4) // more than the limit
	resp, _ = c.ShouldRateLimit(ctx(t), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{d}})
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("cost 4 on limit 3 allowed: %v", resp)
	}
}

func TestShadowNeverOverLimit(t *testing.T) {
	c, _ := dial(t)
	for i := 0; i < 3; i++ {
		resp, err := c.ShouldRateLimit(ctx(t), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*commonv3.RateLimitDescriptor{desc("member", "u1")}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("shadow rule rejected call %d: %v", i, resp)
		}
	}
}

func TestInvalidArgument(t *testing.T) {
	c, _ := dial(t)
	cases := []*rlsv3.RateLimitRequest{
		{Domain: "", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "a")}},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("", "a")}},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "a", "", "b")}},
		{Domain: "edge"},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc(strings.Repeat("k", rules.Max().KeyLen+1), "a")}},
	}
	for i, req := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			_, err := c.ShouldRateLimit(ctx(t), req)
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("case %d: %v, want InvalidArgument", i, err)
			}
		})
	}
	// An unknown domain is not an error: no rule applies.
	resp, err := c.ShouldRateLimit(ctx(t), &rlsv3.RateLimitRequest{Domain: "other", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "a")}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("unknown domain: %v %v", resp, err)
	}
}

func TestHealth(t *testing.T) {
	_, h := dial(t)
	resp, err := h.Check(ctx(t), &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", resp, err)
	}
}

func TestUnit(t *testing.T) {
	cases := []struct {
		limit  int64
		window time.Duration
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
		mult   uint32
		per    int64
	}{
		{600, time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE, 1, 600},
		{10, time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND, 1, 10},
		{100, 2 * time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR, 2, 100},
		{60, 90 * time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND, 90, 60},
		{5, 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY, 1, 5},
		{5, 14 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK, 2, 5},
		{10, 500 * time.Millisecond, rlsv3.RateLimitResponse_RateLimit_SECOND, 1, 20},
		{3, 1500 * time.Millisecond, rlsv3.RateLimitResponse_RateLimit_SECOND, 2, 4},
		{1, 10 * time.Millisecond, rlsv3.RateLimitResponse_RateLimit_SECOND, 1, 100},
		{1, time.Hour + time.Millisecond, rlsv3.RateLimitResponse_RateLimit_SECOND, 3600, 1},
	}
	for _, c := range cases {
		t.Run(c.window.String(), func(t *testing.T) {
			u, m, p := Unit(c.limit, c.window)
			if u != c.unit || m != c.mult || p != c.per {
				t.Errorf("Unit(%d, %v) = %v x%d %d, want %v x%d %d", c.limit, c.window, u, m, p, c.unit, c.mult, c.per)
			}
		})
	}
}

// manyDescriptors returns a request with n descriptors of one entry each,
// or (entries) one descriptor of n entries.
func manyDescriptors(n int, entries bool) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "edge"}
	if entries {
		d := &commonv3.RateLimitDescriptor{}
		for i := 0; i < n; i++ {
			d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: fmt.Sprint("k", i), Value: "v"})
		}
		req.Descriptors = []*commonv3.RateLimitDescriptor{d}
		return req
	}
	for i := 0; i < n; i++ {
		req.Descriptors = append(req.Descriptors, desc("client", fmt.Sprint("c", i)))
	}
	return req
}

// hugeRequest encodes, without building it, a request of domain edge with
// n descriptors client=c0 (or, if entries, one descriptor of n entries).
func hugeRequest(n int, entries bool) []byte {
	var entry, one []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, "client")
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendString(entry, "c0")
	one = protowire.AppendTag(one, 1, protowire.BytesType)
	one = protowire.AppendBytes(one, entry)
	var msg []byte
	msg = protowire.AppendTag(msg, 1, protowire.BytesType)
	msg = protowire.AppendString(msg, "edge")
	if entries {
		var d []byte
		for i := 0; i < n; i++ {
			d = append(d, one...)
		}
		msg = protowire.AppendTag(msg, 2, protowire.BytesType)
		return protowire.AppendBytes(msg, d)
	}
	for i := 0; i < n; i++ {
		msg = protowire.AppendTag(msg, 2, protowire.BytesType)
		msg = protowire.AppendBytes(msg, one)
	}
	return msg
}

// TestDescriptorCaps: a request with more descriptors, or a descriptor
// with more entries, than the service allows is INVALID_ARGUMENT naming
// the bound, 200,000 descriptors (3.2 MB, under gRPC's message bound) and
// 200,000 entries included, and nothing is counted for it;
// WithMaxDescriptors lowers the bounds, never raises them past the rule
// engine's.
func TestDescriptorCaps(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		opts                 []Option
		descriptors, entries int
	}{
		{"default", nil, rules.Max().Descriptors, rules.Max().Entries},
		{"lowered", []Option{WithMaxDescriptors(8, 4)}, 8, 4},
		{"not raised", []Option{WithMaxDescriptors(1<<20, 1<<20)}, rules.Max().Descriptors, rules.Max().Entries},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := dialConn(t, tc.opts...)
			c := rlsv3.NewRateLimitServiceClient(conn)
			for _, at := range []struct {
				req  *rlsv3.RateLimitRequest
				ok   bool
				want string
			}{
				{manyDescriptors(tc.descriptors, false), true, ""},
				{manyDescriptors(tc.descriptors+1, false), false, fmt.Sprintf("%d descriptors: the most a request may have is %d", tc.descriptors+1, tc.descriptors)},
				{manyDescriptors(tc.entries, true), true, ""},
				{manyDescriptors(tc.entries+1, true), false, fmt.Sprintf("descriptor 0 has %d entries: the most a descriptor may have is %d", tc.entries+1, tc.entries)},
			} {
				_, err := c.ShouldRateLimit(ctx(t), at.req)
				if at.ok {
					if err != nil {
						t.Errorf("%d descriptors, %d entries in the first: %v", len(at.req.Descriptors), len(at.req.Descriptors[0].Entries), err)
					}
					continue
				}
				if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != at.want {
					t.Errorf("%v, want InvalidArgument %q", err, at.want)
				}
			}
			if tc.name != "default" {
				return
			}
			// 200,000 descriptors of client=c0, then one descriptor of
			// 200,000 entries, sent as encoded bytes (building them as
			// messages takes the race detector seconds).
			for _, entries := range []bool{false, true} {
				msg := hugeRequest(200_000, entries)
				want := "200000 descriptors: the most a request may have is 64"
				if entries {
					want = "descriptor 0 has 200000 entries: the most a descriptor may have is 64"
				}
				_, err := rawCall(t, conn, msg)
				if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
					t.Errorf("%d bytes: %v, want InvalidArgument %q", len(msg), err, want)
				}
			}
			// Refused requests counted nothing: c0, counted once by the
			// first request, has two of its three calls left (or three,
			// in the next minute's window).
			for i := 0; i < 2; i++ {
				resp, err := c.ShouldRateLimit(ctx(t), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", "c0")}})
				if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
					t.Fatalf("client c0, call %d after the refusals: %v %v", i, resp, err)
				}
			}
		})
	}
}
