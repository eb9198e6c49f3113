package server

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/metrics"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/tracing"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

// discard is a span exporter that drops what it is given: the benchmark
// measures making spans, not shipping them.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkDecisionTracing measures one decision through the server's
// decision path (metrics included): "untraced" calls the path without the
// tracing switch at all, "off" as the server does with tracing off, "on"
// with every span sampled and batched to an exporter that drops them.
//
//	go test ./cmd/floodgate/server -run '^$' -bench DecisionTracing -benchmem
func BenchmarkDecisionTracing(b *testing.B) {
	req := rules.Request{Domain: "default", Descriptors: []rules.Descriptor{{{Key: "client", Value: "bench"}}}}
	b.Run("untraced", func(b *testing.B) {
		o := &observed{engine: rules.NewEngine(rules.Default(), memstore.New(memstore.Options{})), rec: metrics.New()}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := o.check(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, on := range []bool{false, true} {
		name := "off"
		var tr *tracing.Tracing
		if on {
			name = "on"
			var err error
			tr, err = tracing.New(context.Background(), tracing.Config{Enabled: true}, StoreMemory, "local",
				sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Shutdown(context.Background())
		}
		b.Run(name, func(b *testing.B) {
			eng := rules.NewEngine(rules.Default(), tr.Store(memstore.New(memstore.Options{})))
			o := &observed{engine: eng, rec: metrics.New(), tracing: tr}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := o.Check(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
