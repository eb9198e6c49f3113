package envoyratelimit

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace receiver: the spans it is sent, by the
// service.name of their resource.
type collector struct {
	mu       sync.Mutex
	spans    map[string][]*tracepb.Span
	resource map[string]map[string]string
}

func startCollector(t *testing.T) (*collector, string) {
	c := &collector{spans: map[string][]*tracepb.Span{}, resource: map[string]map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(b, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			res := map[string]string{}
			for _, a := range rs.GetResource().GetAttributes() {
				res[a.GetKey()] = a.GetValue().GetStringValue()
			}
			name := res["service.name"]
			c.resource[name] = res
			for _, ss := range rs.GetScopeSpans() {
				c.spans[name] = append(c.spans[name], ss.GetSpans()...)
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return c, srv.URL
}

// shape describes the spans of one service, without ids or times: each
// span's name, kind, its parent's name (or the caller's, "caller", or
// "root"), its attribute keys and its events, sorted.
func (c *collector) shape(service, callerSpan string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	byID := map[string]*tracepb.Span{}
	for _, s := range c.spans[service] {
		byID[string(s.GetSpanId())] = s
	}
	var out []string
	for _, s := range c.spans[service] {
		parent := "root"
		switch p := s.GetParentSpanId(); {
		case hex.EncodeToString(p) == callerSpan:
			parent = "caller"
		case len(p) > 0 && byID[string(p)] != nil:
			parent = byID[string(p)].GetName()
		case len(p) > 0:
			parent = "unknown"
		}
		var keys, events []string
		for _, a := range s.GetAttributes() {
			keys = append(keys, a.GetKey())
		}
		for _, e := range s.GetEvents() {
			events = append(events, e.GetName())
		}
		sort.Strings(keys)
		out = append(out, fmt.Sprintf("%s (%v) under %s: %s; events %v; status %v", s.GetName(), s.GetKind(), parent,
			strings.Join(keys, ","), events, s.GetStatus().GetCode()))
	}
	sort.Strings(out)
	return out
}

func (c *collector) count(service string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.spans[service])
}

// TestTracingAgainstReference runs the reference and compatibility mode
// with the same TRACING_* variables (Envoy Gateway's switch) exporting to
// one OTLP collector, and sends each the same calls: ShouldRateLimit under
// a caller's W3C traceparent, one under a B3 parent, and a POST /json. The
// spans of the first call have the same shape on both: names, kinds,
// parents (the caller's span from traceparent), attribute keys, events
// and statuses; both resources name the service as the variables say; the
// second call joins the B3 caller's trace (on the reference when it is one
// with B3, envoyproxy/ratelimit#1110); the spans of all three calls are the
// same by name.
func TestTracingAgainstReference(t *testing.T) {
	col, url := startCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	layout := runtimeLayout{root: t.TempDir(), subdir: "ratelimit"}
	if err := os.MkdirAll(layout.configDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layout.configDir(), "t.yaml"), []byte("domain: t\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tracing := func(name string) map[string]string {
		return map[string]string{"TRACING_ENABLED": "true", "TRACING_SERVICE_NAME": name, "TRACING_SERVICE_NAMESPACE": "envoy-gateway-system",
			"TRACING_SERVICE_INSTANCE_ID": "pod-1", "TRACING_EXPORTER_PROTOCOL": "http", "TRACING_SAMPLING_RATE": "1"}
	}
	redis := startRedis(t)
	ref := startReference(t, referenceEnv(t, layout, redis.Addr(), tracing("reference")))
	fg, err := startCompat(t, referenceEnv(t, layout, redis.Addr(), tracing("floodgate")))
	if err != nil {
		t.Fatal(err)
	}
	const b3Trace, b3Span = "463ac35c9f6413ad48485a3953bb6124", "a2fb4a1d1a96d312"
	const w3cTrace, w3cSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := func(s *rls, md metadata.MD) {
		if _, err := s.client.ShouldRateLimit(metadata.NewOutgoingContext(ctx, md), newRequest("t", [][][2]string{{{"k", "v"}}}, 1)); err != nil {
			t.Fatal(err)
		}
	}
	services := []string{"reference", "floodgate"}
	shapes := map[string][]string{}
	for i, s := range []*rls{ref, fg} {
		call(s, metadata.Pairs("traceparent", "00-"+w3cTrace+"-"+w3cSpan+"-01"))
		waitFor(ctx, func() bool { return col.count(services[i]) >= 3 })
		shapes[services[i]] = col.shape(services[i], w3cSpan)
	}
	t.Logf("a ShouldRateLimit call under a W3C parent: the reference's spans\n%s", strings.Join(shapes["reference"], "\n"))
	if !slices.Equal(shapes["reference"], shapes["floodgate"]) || len(shapes["reference"]) == 0 {
		t.Errorf("the spans of a call differ:\nreference:\n%s\nfloodgate:\n%s", strings.Join(shapes["reference"], "\n"), strings.Join(shapes["floodgate"], "\n"))
	}
	for _, name := range services {
		if res := col.resource[name]; res["service.namespace"] != "envoy-gateway-system" || res["service.instance.id"] != "pod-1" {
			t.Errorf("%s's resource: %v", name, res)
		}
	}
	for _, s := range []*rls{ref, fg} {
		call(s, metadata.Pairs("x-b3-traceid", b3Trace, "x-b3-spanid", b3Span, "x-b3-sampled", "1"))
		postJSON(ctx, s, []byte(`{"domain":"t","descriptors":[{"entries":[{"key":"k","value":"j"}]}]}`))
	}
	names := func(service string) map[string]int {
		col.mu.Lock()
		defer col.mu.Unlock()
		m := map[string]int{}
		for _, s := range col.spans[service] {
			m[s.GetName()]++
		}
		return m
	}
	for _, name := range services {
		waitFor(ctx, func() bool {
			return names(name)["NewJsonHandler Remaining Execution"] == 1 && names(name)["ShouldRateLimit Execution"] == 3
		})
	}
	if r, f := names("reference"), names("floodgate"); fmt.Sprint(r) != fmt.Sprint(f) {
		t.Errorf("spans by name after a traceparent call, a B3 call and a POST /json: reference %v, floodgate %v", r, f)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, name := range services {
		joined := false
		for _, s := range col.spans[name] {
			if hex.EncodeToString(s.GetTraceId()) == b3Trace && hex.EncodeToString(s.GetParentSpanId()) == b3Span {
				joined = true
			}
		}
		switch {
		case !joined && name == "reference" && !referenceFeatures(t).b3:
			t.Logf("the reference here (%s) predates B3 propagation (envoyproxy/ratelimit#1110): its span does not join the B3 caller's trace", referenceVersion(t))
		case !joined:
			t.Errorf("%s: no span joins the B3 caller's trace", name)
		}
	}
}
