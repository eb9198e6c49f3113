package envoycompat

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// otlpSpans collects the spans an OTLP exporter sends, with their
// resources' attributes.
type otlpSpans struct {
	coltracepb.UnimplementedTraceServiceServer
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource map[string]string
}

func (o *otlpSpans) add(req *coltracepb.ExportTraceServiceRequest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			o.resource[a.GetKey()] = a.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			o.spans = append(o.spans, ss.GetSpans()...)
		}
	}
}

func (o *otlpSpans) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	o.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// named returns the spans with that name.
func (o *otlpSpans) named(name string) []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range o.spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

// otlpHTTP serves OTLP over HTTP (protobuf) on a loopback port and returns
// its collected spans and its endpoint URL.
func otlpHTTP(t *testing.T) (*otlpSpans, string) {
	o := &otlpSpans{resource: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		o.add(req)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return o, srv.URL
}

// otlpGRPC serves OTLP over gRPC on a loopback port.
func otlpGRPC(t *testing.T) (*otlpSpans, string) {
	o := &otlpSpans{resource: map[string]string{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(g, o)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return o, "http://" + ln.Addr().String()
}

// TestTracing runs the server with the reference's tracing variables and
// an OTLP collector of each protocol: a call carrying a B3 parent, one
// carrying a W3C traceparent and a POST /json give the reference's spans,
// under the callers' traces, with the resource the variables name.
func TestTracing(t *testing.T) {
	for _, proto := range []string{"http", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			col, endpoint := otlpHTTP(t)
			if proto == "grpc" {
				col, endpoint = otlpGRPC(t)
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			env := map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": proto,
				"TRACING_SERVICE_NAME": "envoy-ratelimit", "TRACING_SERVICE_NAMESPACE": "envoy-gateway-system",
				"TRACING_SERVICE_INSTANCE_ID": "pod-1", "TRACING_SAMPLING_RATE": "1"}
			stop := startStoppable(t, testRules, env)
			conn, err := grpc.NewClient(stop.srv.Addr(ListenerGRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c := rlsv3.NewRateLimitServiceClient(conn)
			req := &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*commonv3.RateLimitDescriptor{desc("sec", "t")}}
			const b3Trace, b3Span = "463ac35c9f6413ad48485a3953bb6124", "a2fb4a1d1a96d312"
			if _, err := c.ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, "x-b3-traceid", b3Trace, "x-b3-spanid", b3Span, "x-b3-sampled", "1"), req); err != nil {
				t.Fatal(err)
			}
			const w3cTrace, w3cSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
			if _, err := c.ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+w3cTrace+"-"+w3cSpan+"-01"), req); err != nil {
				t.Fatal(err)
			}
			if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil {
				t.Fatal(err)
			}
			post(t, "http://"+stop.srv.Addr(ListenerHTTP)+"/json", "", `{"domain":"test","descriptors":[{"entries":[{"key":"sec","value":"j"}]}]}`)
			stop.stop(t) // flushes the batched spans

			servers := col.named("envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
			if len(servers) != 2 {
				t.Fatalf("%d server spans, want 2: %v", len(servers), col.spans)
			}
			for i, want := range [][2]string{{b3Trace, b3Span}, {w3cTrace, w3cSpan}} {
				s := servers[i]
				if hex.EncodeToString(s.GetTraceId()) != want[0] || hex.EncodeToString(s.GetParentSpanId()) != want[1] || s.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
					t.Errorf("server span %d: trace %x parent %x kind %v, want the caller's trace %s and span %s", i, s.GetTraceId(), s.GetParentSpanId(), s.GetKind(), want[0], want[1])
				}
			}
			decisions, pipelines := col.named("ShouldRateLimit Execution"), col.named("Redis Pipeline Execution")
			if len(decisions) != 3 || len(pipelines) != 3 {
				t.Fatalf("%d decision and %d pipeline spans, want 3 each (two gRPC calls and one /json)", len(decisions), len(pipelines))
			}
			for i := range 2 {
				for _, s := range []*tracepb.Span{decisions[i], pipelines[i]} {
					if string(s.GetParentSpanId()) != string(servers[i].GetSpanId()) {
						t.Errorf("%s of call %d: parent %x, want the server span %x", s.GetName(), i, s.GetParentSpanId(), servers[i].GetSpanId())
					}
				}
			}
			if js := col.named("NewJsonHandler Remaining Execution"); len(js) != 1 || len(js[0].GetParentSpanId()) != 0 || len(decisions[2].GetParentSpanId()) != 0 {
				t.Errorf("POST /json: %d answer spans; want one root, and a root decision span", len(js))
			}
			if len(col.named("grpc.health.v1.Health/Check")) != 1 {
				t.Errorf("no server span for the health check")
			}
			for k, v := range map[string]string{"service.name": "envoy-ratelimit", "service.namespace": "envoy-gateway-system", "service.instance.id": "pod-1"} {
				if col.resource[k] != v {
					t.Errorf("resource %s = %q, want %q", k, col.resource[k], v)
				}
			}
			if !strings.Contains(attrs(decisions[0])["request string"], "sec") || attrs(decisions[0])["domain"] != "test" {
				t.Errorf("decision span attributes %v", attrs(decisions[0]))
			}
		})
	}
}

// attrs are a span's string attributes.
func attrs(s *tracepb.Span) map[string]string {
	out := map[string]string{}
	for _, a := range s.GetAttributes() {
		out[a.GetKey()] = a.GetValue().GetStringValue()
	}
	return out
}

// stoppable is a server a test stops itself.
type stoppable struct {
	srv    *Server
	cancel context.CancelFunc
	done   chan error
}

func (s *stoppable) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	if err := <-s.done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// startStoppable runs the server as startServer does, until stop.
func startStoppable(t *testing.T, rules string, env map[string]string) *stoppable {
	t.Helper()
	m, _ := compatEnv(t, rules)
	srv, cancel, done := launch(t, m, env)
	return &stoppable{srv: srv, cancel: cancel, done: done}
}
