// Package grpclimit rate-limits gRPC services with a Limiter: server
// interceptors (unary and stream) that decide each call by a key (by
// default its full method name and the peer's address), and a client
// interceptor that waits out the server's retry advice.
//
//	lim, _ := floodgate.New(floodgate.Limit{Limit: 100, Window: time.Minute})
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpclimit.Unary(lim, nil)))
//
// A rejected call ends with codes.ResourceExhausted, a google.rpc.RetryInfo
// detail saying how long to wait, and in its trailer a
// grpc-retry-pushback-ms saying the same to gRPC's built-in retry policy
// and the rate-limit fields package ratelimitheader writes (x-ratelimit-limit,
// x-ratelimit-remaining, x-ratelimit-reset, ratelimit-policy, ratelimit,
// retry-after). The rejection sends no headers (a Trailers-Only response),
// which a client's retry policy needs to retry it. Allowed calls carry the
// same fields in their header metadata.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/ratelimitheader"
)

// A KeyFunc returns the key a call is counted by, from its context (peer,
// incoming metadata) and full method name ("/pkg.Service/Method"). An
// error fails the call with codes.InvalidArgument.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// KeyByPeer counts calls by the peer's address (its host, without the
// port), whatever the method.
func KeyByPeer() KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", errors.New("no peer address")
		}
		a := p.Addr.String()
		if host, _, err := net.SplitHostPort(a); err == nil {
			return host, nil
		}
		return a, nil
	}
}

// KeyByMetadata counts calls by the first value of the incoming metadata
// key name (an API key, a tenant), whatever the method. A call without it
// fails with codes.InvalidArgument.
func KeyByMetadata(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) (string, error) {
		if vs := metadata.ValueFromIncomingContext(ctx, name); len(vs) > 0 && vs[0] != "" {
			return vs[0], nil
		}
		return "", fmt.Errorf("missing %s metadata", name)
	}
}

// PerMethod counts each method apart: the key is the full method name, a
// space, and k's key.
func PerMethod(k KeyFunc) KeyFunc {
	return func(ctx context.Context, method string) (string, error) {
		key, err := k(ctx, method)
		if err != nil {
			return "", err
		}
		return method + " " + key, nil
	}
}

// Options configures NewServerInterceptors.
type Options struct {
	// Limiter decides; required.
	Limiter floodgate.Allower
	// Key returns the key a call is counted by; nil means
	// PerMethod(KeyByPeer()).
	Key KeyFunc
	// Name names the limit in the ratelimit-policy and ratelimit fields;
	// empty means "limit".
	Name string
	// Window is the limit's window, for ratelimit-policy; zero means the
	// limiter's own when it has a Limit method.
	Window time.Duration
	// FailClosed fails calls with codes.Unavailable when the limiter
	// fails; by default they go through. Either way the error is logged.
	FailClosed bool
	// Logger receives errors; nil means slog.Default().
	Logger *slog.Logger
}

// Unary returns a unary server interceptor that decides every call with
// l, counted by key (nil means per method and peer address). A nil l
// panics.
func Unary(l floodgate.Allower, key KeyFunc) grpc.UnaryServerInterceptor {
	u, _ := mustInterceptors(l, key)
	return u
}

// Stream returns a stream server interceptor that decides every stream
// when it opens, with l, counted by key (nil means per method and peer).
// A nil l panics.
func Stream(l floodgate.Allower, key KeyFunc) grpc.StreamServerInterceptor {
	_, s := mustInterceptors(l, key)
	return s
}

func mustInterceptors(l floodgate.Allower, key KeyFunc) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	u, s, err := NewServerInterceptors(Options{Limiter: l, Key: key})
	if err != nil {
		panic("grpclimit: " + err.Error())
	}
	return u, s
}

// NewServerInterceptors returns the unary and stream server interceptors o
// describes.
func NewServerInterceptors(o Options) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor, error) {
	if o.Limiter == nil {
		return nil, nil, errors.New("Options.Limiter is nil")
	}
	if o.Key == nil {
		o.Key = PerMethod(KeyByPeer())
	}
	if o.Name = strings.TrimSpace(o.Name); o.Name == "" {
		o.Name = "limit"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	g := &guard{o: o}
	concurrency := false
	if c, ok := o.Limiter.(interface{ Limit() algorithm.Config }); ok {
		cfg := c.Limit()
		if g.o.Window == 0 {
			g.o.Window = cfg.Window
		}
		concurrency = cfg.Algorithm == algorithm.Concurrency
		if a, ok := o.Limiter.(acquirer); ok && concurrency {
			g.acquire = a
		}
	}
	if !concurrency {
		g.headerWindow = g.o.Window
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, lease, err := g.decide(ctx, info.FullMethod)
		if err != nil {
			// In the trailer: a response without headers (Trailers-Only)
			// is one gRPC's retry policy may retry.
			_ = grpc.SetTrailer(ctx, metadata.Join(md, pushback(err)))
			return nil, err
		}
		if md != nil {
			_ = grpc.SetHeader(ctx, md)
		}
		defer g.done(ctx, lease)
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, lease, err := g.decide(ss.Context(), info.FullMethod)
		if err != nil {
			ss.SetTrailer(metadata.Join(md, pushback(err)))
			return err
		}
		if md != nil {
			_ = ss.SetHeader(md)
		}
		defer g.done(ss.Context(), lease)
		return handler(srv, ss)
	}
	return unary, stream, nil
}

// acquirer holds a concurrency limiter's units under a lease:
// *floodgate.Limiter and *rlsclient.Client.
type acquirer interface {
	Acquire(ctx context.Context, key string, n int64) (*floodgate.Lease, error)
}

type guard struct {
	o Options
	// headerWindow is the window the rate-limit fields give: none for a
	// concurrency limit or one whose window is not known.
	headerWindow time.Duration
	acquire      acquirer // set for a concurrency limiter
}

// done gives a concurrency limiter its unit back when a call ends; lease
// is nil when the call holds nothing.
func (g *guard) done(ctx context.Context, lease *floodgate.Lease) {
	if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
		g.o.Logger.Warn("rate limit release failed", "err", err)
	}
}

// decide decides one call: the metadata to send, the key that holds a
// unit (nil if none), and the error that ends the call if it may not
// proceed.
func (g *guard) decide(ctx context.Context, method string) (metadata.MD, *floodgate.Lease, error) {
	key, err := g.o.Key(ctx, method)
	if err != nil {
		return nil, nil, status.Error(codes.InvalidArgument, "rate limit key: "+err.Error())
	}
	var d algorithm.Decision
	var lease *floodgate.Lease
	if g.acquire != nil {
		if lease, err = g.acquire.Acquire(ctx, key, 1); err == nil {
			d = lease.Decision
		}
	} else {
		d, err = g.o.Limiter.Allow(ctx, key)
	}
	if err != nil {
		g.o.Logger.Warn("rate limit check failed", "err", err, "method", method, "fail_closed", g.o.FailClosed)
		if g.o.FailClosed {
			return nil, nil, status.Error(codes.Unavailable, "rate limiter unavailable")
		}
		return nil, nil, nil
	}
	md := metadata.MD{}
	if d.Limit > 0 || !d.Allowed { // no limit applied: nothing to describe
		for _, f := range ratelimitheader.Fields(ratelimitheader.ForDecision(g.o.Name, g.headerWindow, d)) {
			md.Set(strings.ToLower(f.Name), f.Value)
		}
	}
	if !d.Allowed {
		return md, nil, rejection(d)
	}
	if d.Delay > 0 {
		t := time.NewTimer(d.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			g.done(ctx, lease)
			return md, nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return md, lease, nil
}

// rejection is the status of a rejected call.
func rejection(d algorithm.Decision) error {
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limit exceeded (%s): retry after %v", d.Reason, d.RetryAfter))
	if d.RetryAfter > 0 {
		if s, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}); err == nil {
			st = s
		}
	}
	return st.Err()
}

// pushbackTrailer is the trailer gRPC's built-in retry policy reads: a
// client whose service config makes RESOURCE_EXHAUSTED retryable waits that
// many milliseconds before its next attempt, instead of its own backoff.
const pushbackTrailer = "grpc-retry-pushback-ms"

// pushback is the trailer of a rejection that says how long to wait, nil
// for any other error: the RetryInfo delay, rounded up to a millisecond.
func pushback(err error) metadata.MD {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return nil
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			ms := (ri.GetRetryDelay().AsDuration() + time.Millisecond - 1) / time.Millisecond
			return metadata.Pairs(pushbackTrailer, strconv.FormatInt(int64(ms), 10))
		}
	}
	return nil
}
