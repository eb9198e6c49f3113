package httplimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/ratelimitheader"
)

// A KeyFunc returns the key a request is counted by. An error rejects the
// request with 400 Bad Request and the error's text.
type KeyFunc func(r *http.Request) (string, error)

// KeyByIP counts requests by client address, found as Proxies.ClientIP
// describes: forwarding headers are read only from the trusted proxies p
// (nil trusts none, so the key is the connection's peer).
func KeyByIP(p *Proxies) KeyFunc {
	return func(r *http.Request) (string, error) {
		a := p.ClientIP(r)
		if !a.IsValid() {
			return "", errors.New("no client address")
		}
		return a.String(), nil
	}
}

// KeyByHeader counts requests by the value of the request header name,
// such as an API key. A request without the header is rejected with 400.
func KeyByHeader(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", errors.New("missing " + name + " header")
		}
		return v, nil
	}
}

// LimiterOptions configures LimiterMiddleware.
type LimiterOptions struct {
	// Limiter decides; required.
	Limiter floodgate.Allower
	// Key returns the key each request is counted by; nil means
	// KeyByIP(nil), the connection's peer address.
	Key KeyFunc
	// Name names the limit in the RateLimit-Policy and RateLimit header
	// fields and in 429 bodies; empty means "limit".
	Name string
	// Window is the limit's window, for the RateLimit-Policy field. Zero
	// means the limiter's own (Limit().Window) when it has a Limit method.
	Window time.Duration
	// FailClosed answers 503 Service Unavailable, with Retry-After, when
	// the limiter fails (a store or server it cannot reach). By default
	// such requests go through. Either way the error is logged.
	FailClosed bool
	// FailRetryAfter is the Retry-After of the 503 FailClosed answers;
	// zero means one second. It is rounded up to whole seconds.
	FailRetryAfter time.Duration
	// Logger receives errors; nil means slog.Default().
	Logger *slog.Logger
}

// An Option changes one of LimitBy's defaults.
type Option func(*LimiterOptions)

// FailOpen lets a request through when the limiter fails (a store or
// server it cannot reach), logging the error: LimitBy's default.
func FailOpen() Option {
	return func(o *LimiterOptions) { o.FailClosed, o.FailRetryAfter = false, 0 }
}

// FailClosed answers a request with 503 Service Unavailable and
// Retry-After when the limiter fails, logging the error: for a limit that
// protects something which must not be reached unlimited. retryAfter is
// the Retry-After (rounded up to whole seconds); zero means one second.
func FailClosed(retryAfter time.Duration) Option {
	return func(o *LimiterOptions) { o.FailClosed, o.FailRetryAfter = true, retryAfter }
}

// LimitBy returns middleware that lets a request through only when l
// allows its key, with the defaults of LimiterOptions changed by opts:
//
//	lim, _ := floodgate.New(floodgate.Limit{Limit: 100, Window: time.Minute})
//	http.ListenAndServe(":8080", httplimit.LimitBy(lim, httplimit.KeyByIP(nil))(mux))
//
// A request the limiter cannot decide goes through unless the option
// FailClosed is given. A nil key counts by the connection's peer address;
// a nil l panics.
func LimitBy(l floodgate.Allower, key KeyFunc, opts ...Option) func(http.Handler) http.Handler {
	o := LimiterOptions{Limiter: l, Key: key}
	for _, opt := range opts {
		opt(&o)
	}
	mw, err := LimiterMiddleware(o)
	if err != nil {
		panic("httplimit.LimitBy: " + err.Error())
	}
	return mw
}

// LimiterMiddleware returns net/http middleware that decides every request
// with one limiter, counted by the request's key. It answers as
// httprules.Middleware does: the rate-limit header fields on every
// response, 429 with Retry-After and a JSON problem body (Rejection) when
// the limiter rejects, and the request goes through when the limiter
// fails unless FailClosed is set (then 503 with Retry-After).
// A limiter whose decisions carry a Delay (leaky-bucket) holds the request
// for it. A concurrency limiter that has an Acquire method (*floodgate.Limiter,
// *rlsclient.Client) holds the request's unit under a lease, released
// when the handler returns.
func LimiterMiddleware(o LimiterOptions) (func(http.Handler) http.Handler, error) {
	if o.Limiter == nil {
		return nil, errors.New("LimiterOptions.Limiter is nil")
	}
	if o.Key == nil {
		o.Key = KeyByIP(nil)
	}
	if o.Name = strings.TrimSpace(o.Name); o.Name == "" {
		o.Name = "limit"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.FailRetryAfter < 0 {
		return nil, errors.New("LimiterOptions.FailRetryAfter is negative")
	}
	if o.FailRetryAfter == 0 {
		o.FailRetryAfter = time.Second
	}
	lh := &limiterHandler{o: o}
	concurrency := false
	if c, ok := o.Limiter.(interface{ Limit() algorithm.Config }); ok {
		cfg := c.Limit()
		if o.Window == 0 {
			lh.o.Window = cfg.Window
		}
		concurrency = cfg.Algorithm == algorithm.Concurrency
		if a, ok := o.Limiter.(acquirer); ok && concurrency {
			lh.acquire = a
		}
	}
	if !concurrency {
		lh.headerWindow = lh.o.Window
	}
	return func(next http.Handler) http.Handler {
		h := *lh
		h.next = next
		return &h
	}, nil
}

// acquirer holds a concurrency limiter's units under a lease:
// *floodgate.Limiter and *rlsclient.Client.
type acquirer interface {
	Acquire(ctx context.Context, key string, n int64) (*floodgate.Lease, error)
}

type limiterHandler struct {
	o LimiterOptions
	// headerWindow is the window the header fields give: none for a
	// concurrency limit or one whose window is not known.
	headerWindow time.Duration
	acquire      acquirer // set for a concurrency limiter
	next         http.Handler
}

func (h *limiterHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, err := h.o.Key(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx := r.Context()
	var d algorithm.Decision
	var lease *floodgate.Lease
	if h.acquire != nil {
		if lease, err = h.acquire.Acquire(ctx, key, 1); err == nil {
			d = lease.Decision
		}
	} else {
		d, err = h.o.Limiter.Allow(ctx, key)
	}
	if err != nil {
		h.o.Logger.Warn("rate limit check failed", "err", err, "path", r.URL.Path, "fail_closed", h.o.FailClosed)
		if h.o.FailClosed {
			w.Header().Set("Retry-After", strconv.FormatInt(int64((h.o.FailRetryAfter+time.Second-1)/time.Second), 10))
			writeError(w, http.StatusServiceUnavailable, "rate limiter unavailable: "+err.Error())
			return
		}
		h.next.ServeHTTP(w, r)
		return
	}
	if d.Limit > 0 || !d.Allowed { // no limit applied: nothing to describe
		l := [1]ratelimitheader.Limit{{Name: h.o.Name, Limit: d.Limit, Window: h.headerWindow, Decision: d}}
		ratelimitheader.Set(w.Header(), ratelimitheader.Outcome{Limits: l[:], Tightest: l[0], Rejected: !d.Allowed, RetryAfter: d.RetryAfter})
	}
	if !d.Allowed {
		rej := decisionRejection(h.o.Name, h.o.Window, d)
		writeRejection(w, &rej)
		return
	}
	if lease != nil {
		defer func() {
			if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
				h.o.Logger.Warn("rate limit release failed", "err", err)
			}
		}()
	}
	if d.Delay > 0 {
		t := time.NewTimer(d.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
	h.next.ServeHTTP(w, r)
}
