package envoycompat

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.7.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// TracingSettings are the reference's TRACING_* variables. The exporter's
// endpoint, headers, certificate and timeout come from the standard
// OTEL_EXPORTER_OTLP_* variables, read by the OTLP exporter itself, as
// there.
type TracingSettings struct {
	Enabled bool
	// ServiceName, ServiceNamespace and ServiceInstanceID are the spans'
	// resource (service.name, .namespace, .instance.id); an empty
	// instance id is a random UUID.
	ServiceName, ServiceNamespace, ServiceInstanceID string
	// Protocol is http (OTLP over HTTP, protobuf) or grpc.
	Protocol string
	// SamplingRate is the share of traces without a sampled parent that
	// are kept (1: all, 0: none); a sampled parent is always followed.
	SamplingRate float64
}

var tracingSettings = []setting{
	{"TRACING_ENABLED", "false", boolean(func(s *Settings) *bool { return &s.Tracing.Enabled })},
	{"TRACING_SERVICE_NAME", "RateLimit", str(func(s *Settings) *string { return &s.Tracing.ServiceName })},
	{"TRACING_SERVICE_NAMESPACE", "", str(func(s *Settings) *string { return &s.Tracing.ServiceNamespace })},
	{"TRACING_SERVICE_INSTANCE_ID", "", str(func(s *Settings) *string { return &s.Tracing.ServiceInstanceID })},
	{"TRACING_EXPORTER_PROTOCOL", "http", func(s *Settings, v string) error {
		// The reference takes "" as http and stops on anything but http
		// or grpc (in any case is not accepted there either).
		switch v {
		case "", "http":
			s.Tracing.Protocol = "http"
		case "grpc":
			s.Tracing.Protocol = "grpc"
		default:
			return fmt.Errorf("%q: want http or grpc", clip(v))
		}
		return nil
	}},
	{"TRACING_SAMPLING_RATE", "1", func(s *Settings, v string) error {
		f, err := parseFloat(v)
		if err != nil {
			return fmt.Errorf("%q is not a number such as 0.5", clip(v))
		}
		s.Tracing.SamplingRate = f
		return nil
	}},
}

// Instrumentation scopes, as the reference names its tracers.
const (
	scopeGRPC    = "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	scopeService = "ratelimit"
	scopeRedis   = "redis.fixedCacheImpl"
	scopeServer  = "ratelimit server"
)

// tracing makes the spans the reference makes: a server span per gRPC
// call (as its otelgrpc interceptor), with "ShouldRateLimit Execution" and
// "Redis Pipeline Execution" beside each other under it, and for POST
// /json those two and "NewJsonHandler Remaining Execution" as roots. A nil
// *tracing is tracing off.
type tracing struct {
	tp                             *sdktrace.TracerProvider
	prop                           propagation.TextMapPropagator
	grpc, service, redis, jsonSpan trace.Tracer
}

// newTracing sets up the exporter and the tracer provider as the
// reference does; nil when TRACING_ENABLED is off. opts replace the OTLP
// exporter (tests export to memory).
func newTracing(ctx context.Context, set TracingSettings, opts ...sdktrace.TracerProviderOption) (*tracing, error) {
	if !set.Enabled {
		return nil, nil
	}
	if len(opts) == 0 {
		var client otlptrace.Client
		if set.Protocol == "grpc" {
			client = otlptracegrpc.NewClient()
		} else {
			client = otlptracehttp.NewClient()
		}
		exp, err := otlptrace.New(ctx, client)
		if err != nil {
			return nil, fmt.Errorf("TRACING_ENABLED: the OTLP exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	id := set.ServiceInstanceID
	if id == "" {
		id = newUUID()
	}
	res := resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceNameKey.String(set.ServiceName),
		semconv.ServiceNamespaceKey.String(set.ServiceNamespace),
		semconv.ServiceInstanceIDKey.String(id))
	tp := sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(set.SamplingRate))),
		sdktrace.WithResource(res)}, opts...)...)
	return &tracing{
		tp:       tp,
		prop:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, b3.New(), propagation.Baggage{}),
		grpc:     tp.Tracer(scopeGRPC),
		service:  tp.Tracer(scopeService),
		redis:    tp.Tracer(scopeRedis),
		jsonSpan: tp.Tracer(scopeServer),
	}, nil
}

// shutdown sends the spans still batched, waiting at most 5 s.
func (t *tracing) shutdown() {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t.tp.Shutdown(ctx)
}

// newUUID is a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// mdCarrier reads a gRPC call's incoming metadata as a propagation
// carrier.
type mdCarrier metadata.MD

func (c mdCarrier) Get(k string) string {
	if v := metadata.MD(c).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(k, v string) { metadata.MD(c).Set(k, v) }

func (c mdCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// interceptor makes a server span for each gRPC call, as the reference's
// otelgrpc interceptor does: the caller's context taken from W3C
// traceparent, B3 (single or multiple headers) or baggage metadata; named
// by the method; its rpc.* and peer attributes and status (no message
// events, as the reference's interceptor records none).
func (t *tracing) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			ctx = t.prop.Extract(ctx, mdCarrier(md))
		}
		name := strings.TrimPrefix(info.FullMethod, "/")
		attrs := []attribute.KeyValue{semconv.RPCSystemKey.String("grpc")}
		if svc, method, ok := strings.Cut(name, "/"); ok {
			attrs = append(attrs, semconv.RPCServiceKey.String(svc), semconv.RPCMethodKey.String(method))
		}
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			attrs = append(attrs, peerAttrs(p.Addr.String())...)
		}
		ctx, span := t.grpc.Start(trace.ContextWithRemoteSpanContext(ctx, trace.SpanContextFromContext(ctx)), name,
			trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		defer span.End()
		resp, err := h(ctx, req)
		s, _ := status.FromError(err)
		if err != nil && serverFault(s.Code()) {
			span.SetStatus(otelcodes.Error, s.Message())
		}
		span.SetAttributes(attribute.Int64("rpc.grpc.status_code", int64(s.Code())))
		return resp, err
	}
}

// serverFault reports whether a code is the server's fault, the codes
// otelgrpc marks as a span error on the server side.
func serverFault(c codes.Code) bool {
	switch c {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}

// peerAttrs are the peer's attributes as otelgrpc writes them.
func peerAttrs(addr string) []attribute.KeyValue {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	if host == "" {
		host = "127.0.0.1"
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil
	}
	if net.ParseIP(host) != nil {
		return []attribute.KeyValue{attribute.String("net.sock.peer.addr", host), attribute.Int("net.sock.peer.port", port)}
	}
	return []attribute.KeyValue{attribute.String("net.peer.name", host), attribute.Int("net.peer.port", port)}
}

// startDecision starts "ShouldRateLimit Execution"; as in the reference,
// the spans of the call's Redis pipelines are not its children.
func (t *tracing) startDecision(ctx context.Context, req *rlsv3.RateLimitRequest) trace.Span {
	_, span := t.service.Start(ctx, "ShouldRateLimit Execution", trace.WithAttributes(
		attribute.String("domain", req.GetDomain()), attribute.String("request string", req.String())))
	return span
}

// startPipeline starts "Redis Pipeline Execution" for the commands of a
// call to each Redis.
func (t *tracing) startPipeline(ctx context.Context, mainCmds, perSecondCmds int) trace.Span {
	_, span := t.redis.Start(ctx, "Redis Pipeline Execution", trace.WithAttributes(
		attribute.Int("pipeline length", mainCmds), attribute.Int("perSecondPipeline length", perSecondCmds)))
	return span
}

// jsonService makes, after each decision of POST /json, the reference's
// "NewJsonHandler Remaining Execution" span (a root: the reference decides
// /json requests without the HTTP request's context).
type jsonService struct {
	*Service
	t *tracing
}

func (j jsonService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := j.Service.ShouldRateLimit(ctx, req)
	if err == nil {
		_, span := j.t.jsonSpan.Start(context.Background(), "NewJsonHandler Remaining Execution",
			trace.WithAttributes(attribute.String("response", resp.String())))
		span.End()
	}
	return resp, err
}
