// Package tracing exports OpenTelemetry spans of what the server decides:
// one span per decision, a child span per store call, and, on the gateway,
// one server span per proxied request whose context is passed on to the
// upstream. W3C trace context (traceparent, tracestate, baggage) is taken
// from HTTP headers and gRPC metadata, so a decision joins its caller's
// trace.
//
// Tracing is off unless the configuration or the standard OTEL_*
// environment variables switch it on; off, New returns nil and the server
// adds nothing to its decision path.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-dev/floodgate/rules"
)

// Config is the tracing section of the server's configuration.
type Config struct {
	// Enabled switches tracing on; OTEL_TRACES_EXPORTER=otlp does too,
	// and OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none switch it
	// off whatever Enabled says.
	Enabled bool `yaml:"enabled"`
	// Endpoint is the OTLP traces endpoint URL, such as
	// http://collector:4318/v1/traces (http/protobuf) or
	// http://collector:4317 (grpc). Empty: the OTEL_EXPORTER_OTLP_*
	// variables, else the protocol's default on localhost.
	Endpoint string `yaml:"endpoint"`
	// Protocol is http/protobuf or grpc. Empty: the
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL
	// variable, else http/protobuf.
	Protocol string `yaml:"protocol"`
}

// Protocols of Config.Protocol.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Validate checks the protocol's name.
func (c Config) Validate() error {
	switch c.Protocol {
	case "", ProtocolHTTP, ProtocolGRPC:
		return nil
	}
	return fmt.Errorf("protocol %q: want %s or %s", c.Protocol, ProtocolHTTP, ProtocolGRPC)
}

// Tracing makes the server's spans. A nil *Tracing is tracing switched
// off: every method then passes its argument through unchanged.
type Tracing struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	// store and arrangement are attributes of every decision span.
	store, arrangement string
}

// Option adds a TracerProvider option (tests use it to export to an
// in-memory exporter instead of OTLP).
type Option = sdktrace.TracerProviderOption

// New sets tracing up as cfg and the environment say, with spans naming
// the store and arrangement in use; nil when tracing is off.
func New(ctx context.Context, cfg Config, storeType, arrangement string, opts ...Option) (*Tracing, error) {
	on, err := enabled(cfg, os.Getenv)
	if err != nil || !on {
		return nil, err
	}
	if len(opts) == 0 {
		exp, err := exporter(ctx, cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the name.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "floodgate")),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	// The sampler comes from OTEL_TRACES_SAMPLER (default: parent-based,
	// always on).
	tp := sdktrace.NewTracerProvider(append([]Option{sdktrace.WithResource(res)}, opts...)...)
	return &Tracing{
		tp:          tp,
		tracer:      tp.Tracer("github.com/floodgate-dev/floodgate"),
		prop:        propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		store:       storeType,
		arrangement: arrangement,
	}, nil
}

// enabled decides whether tracing is on from cfg and the environment.
func enabled(cfg Config, getenv func(string) string) (bool, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch e := getenv("OTEL_TRACES_EXPORTER"); e {
	case "":
		return cfg.Enabled, nil
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	default:
		return false, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%q: floodgate exports otlp or none", e)
	}
}

// exporter makes the OTLP exporter of cfg's protocol.
func exporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	proto := cfg.Protocol
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if proto == "" {
			proto = os.Getenv(v)
		}
	}
	switch proto {
	case "", ProtocolHTTP:
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(cfg.Endpoint))
		}
		return otlptracehttp.New(ctx, opts...)
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	return nil, fmt.Errorf("tracing: OTLP protocol %q: want %s or %s", proto, ProtocolHTTP, ProtocolGRPC)
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// HTTP takes the caller's trace context from the request's headers, so
// that decisions made for the request join the caller's trace.
func (t *Tracing) HTTP(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("traceparent") != "" {
			r = r.WithContext(t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		h.ServeHTTP(w, r)
	})
}

// Gateway is HTTP for the gateway: a server span for each proxied request,
// a child of the caller's span if it sent one, whose context the request
// carries on to the upstream in its traceparent header.
func (t *Tracing) Gateway(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.tracer.Start(ctx, "gateway "+r.Method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
		defer span.End()
		r = r.WithContext(ctx)
		r.Header.Del("traceparent")
		r.Header.Del("tracestate")
		t.prop.Inject(ctx, propagation.HeaderCarrier(r.Header))
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
	})
}

// statusWriter notes the status code a handler answers with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// UnaryServerInterceptor takes the caller's trace context from the call's
// metadata (Envoy sends traceparent on its rate-limit calls when it traces).
func (t *Tracing) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get("traceparent")) > 0 {
			ctx = t.prop.Extract(ctx, metadataCarrier(md))
		}
		return handler(ctx, req)
	}
}

// metadataCarrier reads trace context from gRPC metadata.
type metadataCarrier metadata.MD

func (m metadataCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m metadataCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }

func (m metadataCarrier) Keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// StartDecision starts the span of one decision, for the request's
// domain; end it with EndDecision.
func (t *Tracing) StartDecision(ctx context.Context, req rules.Request) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, "floodgate.decide", trace.WithAttributes(
		attribute.String("floodgate.domain", req.Domain),
		attribute.String("floodgate.store", t.store),
		attribute.String("floodgate.arrangement", t.arrangement),
	))
}

// EndDecision records the decision's outcome on span and ends it: whether
// the request was allowed, the rules that applied and their algorithms,
// the rules that rejected, or the error.
func EndDecision(span trace.Span, res rules.Result, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return
	}
	ruleNames := make([]string, len(res.Statuses))
	algorithms := make([]string, len(res.Statuses))
	for i, st := range res.Statuses {
		ruleNames[i], algorithms[i] = st.Rule, string(st.Algorithm)
	}
	attrs := []attribute.KeyValue{
		attribute.Bool("floodgate.allowed", res.Allowed),
		attribute.StringSlice("floodgate.rule", ruleNames),
		attribute.StringSlice("floodgate.algorithm", algorithms),
	}
	if len(res.Rejected) > 0 {
		attrs = append(attrs, attribute.StringSlice("floodgate.rejected_by", res.Rejected))
	}
	if res.Unmatched != "" {
		attrs = append(attrs, attribute.String("floodgate.unmatched", res.Unmatched))
	}
	span.SetAttributes(attrs...)
	span.End()
}
