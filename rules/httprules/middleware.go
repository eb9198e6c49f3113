package httprules

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/ratelimitheader"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/rules/ruleheader"
	"github.com/floodgate-dev/floodgate/rules/rulelog"
)

// Checker decides requests against a rule set. *rules.Engine implements it.
type Checker interface {
	// Check decides req and counts it if every rule allows it.
	Check(ctx context.Context, req rules.Request) (rules.Result, error)
	// Release gives back what an allowed req holds under concurrency
	// rules, given the lease its Check returned (rules.Result.Lease).
	Release(ctx context.Context, req rules.Request, lease string) (bool, error)
}

// Options configures the middleware.
type Options struct {
	// Checker decides; required.
	Checker Checker
	// Domain is the rule domain requests are checked in; empty means the
	// rule set's own domain.
	Domain string
	// Sources build the one descriptor each request is described by, in
	// order. Empty means IP(Proxies).
	Sources []Source
	// Describe, when set, replaces Sources: it returns the request's
	// descriptors, or an error that rejects the request with 400.
	Describe func(r *http.Request) ([]rules.Descriptor, error)
	// Proxies are the trusted proxies the default IP source honours.
	Proxies *httplimit.Proxies
	// Hits returns the request's weight (0 means 1); nil means 1.
	Hits func(r *http.Request) int64
	// FailClosed answers 503 when the checker fails (a store error the
	// rules' failure policies did not absorb, or a request past the rule
	// engine's bounds). By default such requests go through: the limiter
	// is not an outage. Either way the error is logged.
	FailClosed bool
	// Logger receives errors and shadow rejections; nil means slog.Default().
	Logger *slog.Logger
	// ShadowLog logs shadow rejections; nil means one record per rule per
	// second to Logger.
	ShadowLog *rulelog.Shadow
	// Unmatched counts and logs the requests no rule applied to (a
	// mistyped Domain, or rules on entries the Sources never produce): they
	// pass unlimited. Nil means a new rulelog.Unmatched writing at most one
	// record a minute to Logger; read its Counts to watch them.
	Unmatched *rulelog.Unmatched
}

// Middleware returns net/http middleware that checks every request against
// the rules before the wrapped handler sees it:
//
//   - Every response carries the headers Fields describes.
//   - A request a rule rejects is answered with 429 Too Many Requests, a
//     Retry-After header and a JSON body naming the rule (see httplimit.Rejection);
//     the handler does not run.
//   - A request a leaky-bucket rule delays waits for its delay, or until
//     the client goes away, and then runs.
//   - Shadow rules never reject; their rejections are logged (see ShadowLog).
//   - What concurrency rules hold is released when the handler returns,
//     panics, or the client goes away.
func Middleware(o Options) (func(http.Handler) http.Handler, error) {
	if o.Checker == nil {
		return nil, errors.New("httprules: Options.Checker is nil")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if len(o.Sources) == 0 && o.Describe == nil {
		o.Sources = []Source{IP(o.Proxies)}
	}
	if o.ShadowLog == nil {
		o.ShadowLog = rulelog.NewShadow(o.Logger, time.Second)
	}
	if o.Unmatched == nil {
		o.Unmatched = rulelog.NewUnmatched(o.Logger, time.Minute)
	}
	return func(next http.Handler) http.Handler {
		return &handler{o: o, next: next}
	}, nil
}

type handler struct {
	o    Options
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := rules.Request{Domain: h.o.Domain}
	if h.o.Describe != nil {
		ds, err := h.o.Describe(r)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		req.Descriptors = ds
	} else {
		req.Descriptors = []rules.Descriptor{Describe(r, h.o.Sources)}
	}
	if h.o.Hits != nil {
		req.Hits = h.o.Hits(r)
	}
	ctx := r.Context()
	res, err := h.o.Checker.Check(ctx, req)
	if err != nil {
		checkFailed(w, r, h.next, h.o.Logger, h.o.FailClosed, err)
		return
	}
	if shadowRejected(res) {
		h.o.ShadowLog.Record(res, "path", r.URL.Path)
	}
	if res.Unmatched != "" {
		h.o.Unmatched.Record(req, res, "path", r.URL.Path)
	}
	ruleheader.Set(w.Header(), res)
	if !res.Allowed {
		w.Header().Set("Content-Type", "application/problem+json")
		writeJSON(w, http.StatusTooManyRequests, NewRejection(res))
		return
	}
	if res.Holds() {
		defer func() {
			if _, err := h.o.Checker.Release(context.WithoutCancel(ctx), req, res.Lease); err != nil {
				h.o.Logger.Warn("rate limit release failed", "err", err)
			}
		}()
	}
	if d := res.Delay(); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			// The client went away while queued; nobody reads an answer.
			return
		}
	}
	h.next.ServeHTTP(w, r)
}

// NewRejection describes a rejected result for a 429 body.
func NewRejection(res rules.Result) httplimit.Rejection {
	rej := httplimit.Rejection{
		Type:       httplimit.ProblemQuotaExceeded,
		Title:      "Request cannot be satisfied as assigned quota has been exceeded",
		Error:      "rate limit exceeded",
		RetryAfter: retryAfterSeconds(res),
	}
	var worst *rules.Status
	for i := range res.Statuses {
		s := &res.Statuses[i]
		if s.Shadow || s.Decision.Allowed {
			continue
		}
		rej.Rules = append(rej.Rules, s.Rule)
		if worst == nil || s.Decision.RetryAfter > worst.Decision.RetryAfter {
			worst = s
		}
	}
	rej.ViolatedPolicies = rej.Rules
	if worst != nil {
		rej.Rule = worst.Rule
		rej.Limit = worst.Limit
		rej.Window = window.Format(worst.Window)
		rej.WindowSeconds = worst.Window.Seconds()
		rej.Remaining = worst.Decision.Remaining
		rej.Reason = worst.Decision.Reason
		rej.Message = worst.Message()
	}
	return rej
}

// checkFailed answers a request whose rate-limit check failed (the store
// could not decide): 503 when the limit fails closed, else the request goes
// on to next. Either way the failure is logged.
func checkFailed(w http.ResponseWriter, r *http.Request, next http.Handler, log *slog.Logger, failClosed bool, err error) {
	log.Warn("rate limit check failed", "err", err, "path", r.URL.Path, "fail_closed", failClosed)
	if failClosed {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "rate limiter unavailable: " + err.Error()})
		return
	}
	next.ServeHTTP(w, r)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// shadowRejected reports whether a shadow rule in res would have rejected:
// whether Record has anything to log (checked first, so the common request
// does not box Record's arguments).
func shadowRejected(res rules.Result) bool {
	for i := range res.Statuses {
		if st := &res.Statuses[i]; st.Shadow && !st.Decision.Allowed {
			return true
		}
	}
	return false
}

// retryAfterSeconds returns the Retry-After value of a rejected request
// (see ratelimitheader.RetryAfterSeconds); 0 when res allows the request.
func retryAfterSeconds(res rules.Result) int64 {
	if res.Allowed {
		return 0
	}
	return ratelimitheader.RetryAfterSeconds(res.RetryAfter())
}
