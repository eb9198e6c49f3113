package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

// Store wraps s so that every call made within a traced decision gets a
// child span (floodgate.store.decide, .release, .sync) naming the store;
// calls without a span in their context (background syncs) get none. The
// wrapper is a store.Syncer when s is one. Off (nil t), Store returns s.
func (t *Tracing) Store(s store.Store) store.Store {
	if t == nil {
		return s
	}
	ts := &tracedStore{inner: s, t: t}
	if sy, ok := s.(store.Syncer); ok {
		return &tracedSyncStore{tracedStore: ts, syncer: sy}
	}
	return ts
}

type tracedStore struct {
	inner store.Store
	t     *Tracing
}

// start starts a store span under ctx's span, if ctx has one.
func (s *tracedStore) start(ctx context.Context, name string, n int) (context.Context, trace.Span, bool) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil, false
	}
	ctx, span := s.t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("floodgate.store", s.t.store), attribute.Int("floodgate.requests", n)))
	return ctx, span, true
}

func end(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (s *tracedStore) Decide(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) error {
	ctx, span, ok := s.start(ctx, "floodgate.store.decide", len(reqs))
	err := s.inner.Decide(ctx, now, reqs, out)
	if ok {
		end(span, err)
	}
	return err
}

func (s *tracedStore) DecideOne(ctx context.Context, now int64, req store.Request) (algorithm.Decision, error) {
	ctx, span, ok := s.start(ctx, "floodgate.store.decide", 1)
	d, err := s.inner.DecideOne(ctx, now, req)
	if ok {
		end(span, err)
	}
	return d, err
}

func (s *tracedStore) Release(ctx context.Context, now int64, reqs []store.Request) error {
	ctx, span, ok := s.start(ctx, "floodgate.store.release", len(reqs))
	err := s.inner.Release(ctx, now, reqs)
	if ok {
		end(span, err)
	}
	return err
}

type tracedSyncStore struct {
	*tracedStore
	syncer store.Syncer
}

func (s *tracedSyncStore) Sync(ctx context.Context, now int64, batches []store.SyncBatch) error {
	ctx, span, ok := s.start(ctx, "floodgate.store.sync", len(batches))
	err := s.syncer.Sync(ctx, now, batches)
	if ok {
		end(span, err)
	}
	return err
}

// Acquire passes a lease acquisition to the wrapped store, or returns
// store.ErrNoLeases if it holds none.
func (s *tracedStore) Acquire(ctx context.Context, now int64, id lease.ID, reqs []store.Request, out []algorithm.Decision) error {
	ls, ok := s.inner.(store.Leaser)
	if !ok {
		return store.ErrNoLeases
	}
	ctx, span, traced := s.start(ctx, "floodgate.store.decide", len(reqs))
	err := ls.Acquire(ctx, now, id, reqs, out)
	if traced {
		end(span, err)
	}
	return err
}

// ReleaseLease passes a lease release to the wrapped store, or returns
// store.ErrNoLeases if it holds none.
func (s *tracedStore) ReleaseLease(ctx context.Context, now int64, id lease.ID, reqs []store.Request) (bool, error) {
	ls, ok := s.inner.(store.Leaser)
	if !ok {
		return false, store.ErrNoLeases
	}
	ctx, span, traced := s.start(ctx, "floodgate.store.release", len(reqs))
	held, err := ls.ReleaseLease(ctx, now, id, reqs)
	if traced {
		end(span, err)
	}
	return held, err
}
