package server

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/tracing"
)

// otlpReceiver is an OTLP/HTTP traces endpoint: it decodes what the
// exporter posts, as a collector would, and keeps the spans.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	srv   *httptest.Server
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("OTLP receiver: %s %s %q %v", req.Method, req.URL.Path, req.Header.Get("Content-Type"), err)
			http.Error(w, "bad request", 400)
			return
		}
		var msg collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &msg); err != nil {
			t.Errorf("OTLP receiver: %v", err)
			http.Error(w, "bad request", 400)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// inTrace returns the spans of the trace with the given hex id.
func (r *otlpReceiver) inTrace(traceID string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if hex.EncodeToString(s.TraceId) == traceID {
			out = append(out, s)
		}
	}
	return out
}

func attr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			switch v := a.Value.Value.(type) {
			case *commonpb.AnyValue_StringValue:
				return v.StringValue
			case *commonpb.AnyValue_BoolValue:
				if v.BoolValue {
					return "true"
				}
				return "false"
			case *commonpb.AnyValue_ArrayValue:
				var parts []string
				for _, e := range v.ArrayValue.Values {
					parts = append(parts, e.GetStringValue())
				}
				return strings.Join(parts, ",")
			}
		}
	}
	return ""
}

// TestTracingExportsDecisions runs the server with tracing on, exporting
// over OTLP/HTTP to a receiver in the test, and calls it with a W3C
// traceparent through the JSON API, RLS (gRPC metadata) and the gateway:
// each decision's span is a child of the caller's span and carries the
// decision's attributes, the store call is a child of the decision, and
// the gateway passes its own span on to the upstream.
func TestTracingExportsDecisions(t *testing.T) {
	recv := newOTLPReceiver(t)
	upstreamParent := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamParent <- r.Header.Get("traceparent")
	}))
	defer up.Close()

	cfg := testConfig()
	cfg.Tracing = tracing.Config{Enabled: true, Endpoint: recv.srv.URL + "/v1/traces"}
	cfg.Gateway.Routes = []Route{{Prefix: "/", Upstream: up.URL}}
	cfg.Gateway.Descriptors = []string{"ip"}
	r := start(t, cfg)

	const (
		apiTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		rlsTrace = "5bf92f3577b34da6a3ce929d0e0e4737"
		gwTrace  = "6bf92f3577b34da6a3ce929d0e0e4738"
		caller   = "00f067aa0ba902b7"
	)
	traceparent := func(trace string) string { return "00-" + trace + "-" + caller + "-01" }

	req, _ := http.NewRequest("POST", r.url("/v1/check"),
		strings.NewReader(`{"domain":"default","descriptors":[{"entries":[{"key":"client","value":"traced"}]}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent(apiTrace))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	c, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mctx := metadata.AppendToOutgoingContext(ctx, "traceparent", traceparent(rlsTrace))
	if _, err := c.ShouldRateLimit(mctx, rlsReq("default", "client", "traced")); err != nil {
		t.Fatal(err)
	}

	greq, _ := http.NewRequest("GET", "http://"+r.srv.Addr(ListenerGateway)+"/page", nil)
	greq.Header.Set("traceparent", traceparent(gwTrace))
	gresp, err := http.DefaultClient.Do(greq)
	if err != nil {
		t.Fatal(err)
	}
	gresp.Body.Close()
	var passedOn string
	select {
	case passedOn = <-upstreamParent:
	case <-ctx.Done():
		t.Fatal("the upstream was not called")
	}

	r.shutdown(t) // exports what is buffered

	for _, c := range []struct{ name, trace string }{{"JSON API", apiTrace}, {"RLS", rlsTrace}, {"gateway", gwTrace}} {
		t.Run(c.name, func(t *testing.T) {
			spans := recv.inTrace(c.trace)
			byName := map[string]*tracepb.Span{}
			for _, s := range spans {
				byName[s.Name] = s
			}
			d := byName["floodgate.decide"]
			if d == nil {
				t.Fatalf("no decision span in trace %s; spans: %v", c.trace, spans)
			}
			wantParent := caller
			if c.trace == gwTrace {
				g := byName["gateway GET"]
				if g == nil || hex.EncodeToString(g.ParentSpanId) != caller || g.Kind != tracepb.Span_SPAN_KIND_SERVER {
					t.Fatalf("gateway span %v, want a server span child of %s", g, caller)
				}
				wantParent = hex.EncodeToString(g.SpanId)
				if want := "00-" + gwTrace + "-" + wantParent + "-01"; passedOn != want {
					t.Errorf("upstream got traceparent %q, want %q (the gateway's span)", passedOn, want)
				}
			}
			if got := hex.EncodeToString(d.ParentSpanId); got != wantParent {
				t.Errorf("decision span's parent %s, want %s", got, wantParent)
			}
			for k, want := range map[string]string{
				"floodgate.allowed": "true", "floodgate.store": "memory", "floodgate.arrangement": "local",
			} {
				if got := attr(d, k); got != want {
					t.Errorf("decision span %s = %q, want %q", k, got, want)
				}
			}
			if attr(d, "floodgate.rule") == "" || attr(d, "floodgate.algorithm") == "" {
				t.Errorf("decision span without rule or algorithm: %v", d.Attributes)
			}
			st := byName["floodgate.store.decide"]
			if st == nil || hex.EncodeToString(st.ParentSpanId) != hex.EncodeToString(d.SpanId) {
				t.Errorf("store span %v, want a child of the decision span", st)
			}
		})
	}
}

// TestTracingOffByDefault checks that the default configuration makes no
// tracer, and that the OTEL_ variables switch it on and off.
func TestTracingOffByDefault(t *testing.T) {
	// discard releases a server New built and nothing served.
	discard := func(s *Server) {
		s.grpc.Stop()
		s.closeStore(context.Background())
	}
	srv, err := New(context.Background(), testConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if srv.tracing != nil || srv.check.tracing != nil {
		t.Error("tracing on in the default configuration")
	}
	discard(srv)

	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:1/v1/traces")
	srv, err = New(context.Background(), testConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if srv.tracing == nil {
		t.Error("OTEL_TRACES_EXPORTER=otlp did not switch tracing on")
	}
	discard(srv)

	t.Setenv("OTEL_SDK_DISABLED", "true")
	cfg := testConfig()
	cfg.Tracing.Enabled = true
	srv, err = New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if srv.tracing != nil {
		t.Error("OTEL_SDK_DISABLED=true did not switch tracing off")
	}
	discard(srv)

	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	if _, err := New(context.Background(), testConfig(), nil); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Errorf("OTEL_TRACES_EXPORTER=zipkin: %v, want an error naming it", err)
	}
}
