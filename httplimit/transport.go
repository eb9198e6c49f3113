package httplimit

import (
	"fmt"
	"net/http"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/internal/ctxsleep"
)

// LimitError is the error a call fails with when a limiter (LimiterTransport)
// or a rule (package httprules' Transport) rejects it.
type LimitError struct {
	// Rule is the rejecting rule with the longest wait; empty for a
	// LimiterTransport.
	Rule string
	// RetryAfter is how long until the call would be allowed.
	RetryAfter time.Duration
}

// Error names the rule and the wait.
func (e *LimitError) Error() string {
	if e.Rule == "" {
		return fmt.Sprintf("rate limited: retry after %v", e.RetryAfter)
	}
	return fmt.Sprintf("rate limited by rule %q: retry after %v", e.Rule, e.RetryAfter)
}

// LimiterTransport is an http.RoundTripper that holds outgoing calls to
// one limiter, with no rule file: the single-limiter counterpart of
// httprules.Transport. Before a call is sent it waits until Limiter allows the
// call's key, as floodgate.Limiter.Wait does (sleeping each rejection's
// RetryAfter, and a leaky bucket's Delay), or fails with a *LimitError
// when the call's context would end first or the call can never be
// allowed. A limiter error fails the call.
type LimiterTransport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Limiter decides; required. A *floodgate.Limiter or an
	// *rlsclient.Client.
	Limiter floodgate.Allower
	// Key returns the key a call is counted by; nil means the URL's host.
	Key func(*http.Request) string
	// NoWait fails a rejected call at once instead of waiting.
	NoWait bool
}

// RoundTrip implements http.RoundTripper.
func (t *LimiterTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.Limiter == nil {
		return nil, fmt.Errorf("httplimit: LimiterTransport.Limiter is nil")
	}
	key := r.URL.Host
	if t.Key != nil {
		key = t.Key(r)
	}
	ctx := r.Context()
	for {
		d, err := t.Limiter.Allow(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("httplimit: rate limiter: %w", err)
		}
		pause := d.Delay
		if !d.Allowed {
			lerr := &LimitError{RetryAfter: d.RetryAfter}
			if t.NoWait || d.RetryAfter <= 0 {
				return nil, lerr
			}
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d.RetryAfter {
				return nil, lerr
			}
			pause = d.RetryAfter
		}
		if err := ctxsleep.Sleep(ctx, pause); err != nil {
			return nil, err
		}
		if d.Allowed {
			break
		}
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}
