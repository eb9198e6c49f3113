package httprules

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/internal/ctxsleep"
	"github.com/floodgate-dev/floodgate/rules"
)

// Transport is an http.RoundTripper that throttles outgoing calls, so a
// client keeps the limits a dependency sets (or that protect it) at the
// call site. Each request is checked against the rules before it is sent;
// when a rule rejects it, Transport either waits and tries again (Wait) or
// fails the call with a *httplimit.LimitError without sending it.
//
// What concurrency rules hold is released when the response body is closed
// or read to its end, or at once when the call fails.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Checker decides; required.
	Checker Checker
	// Domain is the rule domain; empty means the rule set's own.
	Domain string
	// Sources build the request's one descriptor. Empty means the
	// entries host (the URL's host), method and path.
	Sources []Source
	// Wait makes a rejected call wait for the rule's RetryAfter and try
	// again, until it is allowed, the request's context ends or MaxWait has
	// passed. Without Wait a rejected call fails at once.
	Wait bool
	// MaxWait bounds the total waiting of one call; 0 means only the
	// request's context bounds it.
	MaxWait time.Duration
	// FailClosed fails the call when the checker errs; by default the call
	// is sent.
	FailClosed bool
}

// urlHost is the entry {"host", the URL's host} of an outgoing request.
func urlHost() Source {
	return Source{Key: "host", Value: func(r *http.Request) (string, bool) { return r.URL.Host, r.URL.Host != "" }}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if t.Checker == nil {
		return nil, fmt.Errorf("httprules: Transport.Checker is nil")
	}
	sources := t.Sources
	if len(sources) == 0 {
		sources = []Source{urlHost(), Method(), Path()}
	}
	req := rules.Request{Domain: t.Domain, Descriptors: []rules.Descriptor{Describe(r, sources)}}
	ctx := r.Context()
	if t.Wait && t.MaxWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.MaxWait)
		defer cancel()
	}
	var res rules.Result
	for {
		var err error
		res, err = t.Checker.Check(ctx, req)
		if err != nil {
			if t.FailClosed {
				return nil, fmt.Errorf("httprules: rate limiter unavailable: %w", err)
			}
			return base.RoundTrip(r)
		}
		if res.Allowed {
			break
		}
		rej := NewRejection(res)
		wait := retryDuration(res)
		lerr := &httplimit.LimitError{Rule: rej.Rule, RetryAfter: wait}
		if !t.Wait {
			return nil, lerr
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return nil, lerr
		}
		if err := ctxsleep.Sleep(ctx, wait); err != nil {
			return nil, lerr
		}
	}
	release := func() {}
	if res.Holds() {
		var once sync.Once
		release = func() {
			once.Do(func() { _, _ = t.Checker.Release(context.WithoutCancel(r.Context()), req, res.Lease) })
		}
	}
	if d := res.Delay(); d > 0 {
		if err := ctxsleep.Sleep(r.Context(), d); err != nil {
			release()
			return nil, err
		}
	}
	resp, err := base.RoundTrip(r)
	if err != nil {
		release()
		return nil, err
	}
	if res.Holds() {
		resp.Body = &releasingBody{ReadCloser: resp.Body, release: release}
	}
	return resp, nil
}

// retryDuration is the longest RetryAfter of the rules that rejected res,
// at least 10ms so a waiting caller never spins (a concurrency rule has no
// retry time: its slot frees when another call ends).
func retryDuration(res rules.Result) time.Duration {
	d := 10 * time.Millisecond
	for _, s := range res.Statuses {
		if !s.Shadow && !s.Decision.Allowed && s.Decision.RetryAfter > d {
			d = s.Decision.RetryAfter
		}
	}
	return d
}

// releasingBody releases concurrency units when the body is closed or
// read to its end.
type releasingBody struct {
	io.ReadCloser
	release func()
}

func (b *releasingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.release()
	}
	return n, err
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}
